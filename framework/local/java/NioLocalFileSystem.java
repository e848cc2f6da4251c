package io.flamepipe.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (checksums and all, so {@code FileSystem.getLocal} still
 * returns a {@link LocalFileSystem} for every other Spark query of the session) whose
 * permissions are set through java.nio instead of a forked {@code chmod}.
 *
 * <p>Without Hadoop's native library, {@link RawLocalFileSystem#setPermission} spawns a
 * {@code chmod} process for every file and its checksum twin: four spawns per Spark
 * micro-batch for the offset and commit logs, which cost 14 ms each at p50 on 2 cores
 * (docs/latency.md).
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }

  /** The raw layer: RawLocalFileSystem with a fork-free setPermission. */
  public static class NioRawLocalFileSystem extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_READ,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      short mode = permission.toShort();
      if ((mode & ~0777) != 0) { // sticky bit: java.nio cannot set it, chmod can
        super.setPermission(p, permission);
        return;
      }
      Set<PosixFilePermission> perms = EnumSet.noneOf(PosixFilePermission.class);
      for (int bit = 0; bit < BITS.length; bit++) {
        if ((mode & (1 << bit)) != 0) {
          perms.add(BITS[bit]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
    }
  }
}
