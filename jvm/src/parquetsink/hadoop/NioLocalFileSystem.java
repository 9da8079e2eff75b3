package parquetsink.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local filesystem ({@code file:} without {@code .crc} files), setting permissions through
 * {@code java.nio} instead of a {@code chmod} process.
 *
 * <p>Without Hadoop's native library, {@link RawLocalFileSystem#setPermission} runs {@code chmod} in a process of
 * its own (~7 ms on a 2-core host), and Hadoop calls it for every file and directory it creates with a permission:
 * every data file Spark's Parquet writer creates, every partition directory, the manifest's temporary file. This
 * class gives a file or directory exactly the mode the raw filesystem would ({@code rwx} bits; a mode with the
 * sticky, setuid or setgid bit, or a filesystem without POSIX attributes, is left to the raw filesystem's
 * {@code chmod}) and asks nothing when it already has it: the common case, a new file created under the process's
 * umask. Everything else is the raw filesystem's.
 *
 * <p>The parquet-sink Spark writer path names it in {@code fs.file.impl} for its own writes only (with
 * {@code fs.file.impl.disable.cache}), once its JAR is loadable on the driver (see
 * {@code parquet_sink/write/manifest_write.py}); built by {@code jvm/build.sh} into
 * {@code src/parquet_sink/write/parquet-sink-jvm.jar}.
 */
public class NioLocalFileSystem extends RawLocalFileSystem {
    /** The permission for each bit of a mode, lowest bit first. */
    private static final PosixFilePermission[] BITS = {
        PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
        PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
        int mode = permission.toShort();
        if ((mode & ~0777) != 0) {
            super.setPermission(p, permission);
            return;
        }
        Set<PosixFilePermission> wanted = EnumSet.noneOf(PosixFilePermission.class);
        for (int bit = 0; bit < BITS.length; bit++) {
            if ((mode & (1 << bit)) != 0) {
                wanted.add(BITS[bit]);
            }
        }
        java.nio.file.Path file = pathToFile(p).toPath();
        try {
            if (!Files.getPosixFilePermissions(file).equals(wanted)) {
                Files.setPosixFilePermissions(file, wanted);
            }
        } catch (UnsupportedOperationException e) {
            super.setPermission(p, permission);
        }
    }
}
