// /proc/self/mountinfo as the daemon reads it to find its own mount (fs/own_mount.h): ids, the
// device, the mount point with the kernel's octal escapes undone; a line it cannot read is
// skipped, never a crash or a wrong entry.
#include <gtest/gtest.h>
#include <sys/sysmacros.h>

#include <string>

#include "fs/own_mount.h"

namespace fid::fs {
namespace {

TEST(Mountinfo, ReadsIdsDeviceAndTheUnescapedMountPoint) {
  const std::string text =
      "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
      "36 22 0:52 / /mnt/a\\040b\\134c rw,nosuid - fuse.fidelityfs store rw,user_id=0\n"
      "37 36 0:53 / /mnt/a\\040b\\134c rw - tmpfs other rw";
  const std::vector<MountEntry> m = parse_mountinfo(text);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].id, 22);
  EXPECT_EQ(m[0].parent, 1);
  EXPECT_EQ(m[0].dev, makedev(254, 0));
  EXPECT_EQ(m[0].point, "/");
  EXPECT_EQ(m[1].dev, makedev(0, 52));
  EXPECT_EQ(m[1].point, "/mnt/a b\\c");
  EXPECT_EQ(m[2].parent, 36);  // mounted over m[1]: what OwnMount::place calls covered
  EXPECT_EQ(m[2].point, m[1].point);
}

TEST(Mountinfo, ALineItCannotReadIsSkipped) {
  const std::string text =
      "\n"
      "x 1 0:1 / /a rw\n"
      "5 1 0:1\n"
      "6 1 01 / /b rw\n"
      "7 1 0:99999999999 / /c rw\n"
      "8 1 0:2 / /d\\04 rw\n"
      "9 1 0:3 / /e rw";
  const std::vector<MountEntry> m = parse_mountinfo(text);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].point, "/d\\04");  // an escape cut short stays as written
  EXPECT_EQ(m[1].id, 9);
  EXPECT_EQ(m[1].point, "/e");
}

}  // namespace
}  // namespace fid::fs
