import java.io.File;
import java.io.IOException;

import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.internal.io.FileCommitProtocol;
import org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol;

/**
 * Spark's streaming file sink's commit protocol ({@code spark.sql.streaming.commitProtocolClass}), which the
 * sink's Spark writer path runs on classic PySpark, except
 * that the first task attempt of the whole run to commit halts its executor JVM right after its task
 * commit, before the task reports success: an executor dying during task commit. "First" is claimed with a
 * ticket file {@code task_commit.1} in the directory named by {@code PARQUET_SINK_FAILPOINT_STATE}, as the
 * Python failpoints count hits across processes; without that variable nothing happens. Used by
 * tests/crash/test_crash.py on {@code local-cluster}, where an executor is a JVM of its own.
 */
public class HaltAfterTaskCommit extends ManifestFileCommitProtocol {
    public HaltAfterTaskCommit(String jobId, String path) {
        super(jobId, path);
    }

    @Override
    public FileCommitProtocol.TaskCommitMessage commitTask(TaskAttemptContext taskContext) {
        FileCommitProtocol.TaskCommitMessage message = super.commitTask(taskContext);
        String state = System.getenv("PARQUET_SINK_FAILPOINT_STATE");
        if (state != null) {
            try {
                new File(state).mkdirs();
                if (new File(state, "task_commit.1").createNewFile()) {
                    Runtime.getRuntime().halt(137);
                }
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
        }
        return message;
    }
}
