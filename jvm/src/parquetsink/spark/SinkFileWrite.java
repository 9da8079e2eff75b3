package parquetsink.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.internal.io.FileCommitProtocol;
import org.apache.spark.sql.catalyst.catalog.BucketSpec;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SQLExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.BasicWriteJobStatsTracker;
import org.apache.spark.sql.execution.datasources.FileFormat;
import org.apache.spark.sql.execution.datasources.FileFormatWriter;
import org.apache.spark.sql.execution.datasources.WriteJobStatsTracker;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol;
import org.apache.spark.sql.execution.streaming.sinks.FileStreamSinkLog;
import org.apache.spark.sql.internal.SessionState;
import org.apache.spark.util.SerializableConfiguration;

import scala.Function0;
import scala.Option;
import scala.collection.immutable.Map;
import scala.collection.immutable.Map$;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction0;
import scala.runtime.BoxedUnit;

/**
 * Spark's streaming file sink's write of one micro-batch ({@code FileStreamSink.addBatch}), in one call from Python.
 *
 * <p>{@code FileFormatWriter.write} with the commit protocol {@code spark.sql.streaming.commitProtocolClass} names (a
 * {@code ManifestFileCommitProtocol}: tasks write their files under their final names, the job commit lists the
 * accepted attempts' files in a {@code FileStreamSinkLog}, here the <em>manifest</em> at batch 0), a
 * {@code BasicWriteJobStatsTracker} counting the rows the accepted attempts wrote, and the batch's rows as the
 * streaming plan produced them ({@link BatchRowsExec#unwrap}). What {@code parquet_sink/write/manifest_write.py}
 * did through py4j before, ~28 round trips a batch (and the collection of their temporary objects); now one.
 *
 * <p>Compiled against Spark 4 (Scala 2.13); {@link #usable} tells whether this Spark has every member it calls (the
 * Spark writer path checks it once per SparkContext; without it a batch is written with {@code df.write}). Built by
 * {@code jvm/build.sh}.
 */
public final class SinkFileWrite {
    private SinkFileWrite() {
    }

    /**
     * Writes {@code ds} under {@code output} (a Hadoop path) as Spark's file sink writes a micro-batch, partitioned by
     * {@code partitionColumns} (names of {@code ds}'s columns), with the Parquet writer {@code options} (also in the
     * job's Hadoop configuration, as {@code df.write} puts them). The manifest, a {@code FileStreamSinkLog} at
     * {@code manifest}, is written with {@code logSession}'s settings. {@code unwrapRows}: the batch's rows through
     * {@link BatchRowsExec} (where it is usable with this Spark), a {@code foreachBatch} batch not planned again
     * ({@link BatchRowsExec#ofBatch}). Returns the rows the accepted task attempts wrote,
     * or -1, nothing written, when the session's commit protocol is not a manifest protocol (its commit messages are
     * not the files' statuses).
     */
    public static long write(
        Dataset<?> ds, SparkSession logSession, String output, String manifest, String jobId,
        List<String> partitionColumns, java.util.Map<String, String> options, boolean unwrapRows
    ) {
        SparkSession session = ds.sparkSession();
        SessionState state = session.sessionState();
        FileCommitProtocol committer = committer(state, jobId, output);
        if (!(committer instanceof ManifestFileCommitProtocol)) {
            return -1;
        }
        Map<String, String> scalaOptions = Map$.MODULE$.from(CollectionConverters.asScala(options));
        Configuration hadoopConf = state.newHadoopConfWithOptions(scalaOptions);
        FileStreamSinkLog manifestLog = new FileStreamSinkLog(1, logSession, manifest, Option.empty());
        ((ManifestFileCommitProtocol) committer).setupManifestOptions(manifestLog, 0L);
        QueryExecution execution = ds.queryExecution();
        Seq<Attribute> columns = execution.analyzed().output();
        List<String> names = Arrays.asList(ds.columns());
        List<Attribute> partitions = new ArrayList<>();
        for (String name : partitionColumns) {
            partitions.add(columns.apply(names.indexOf(name)));
        }
        Map<String, SQLMetric> metrics = BasicWriteJobStatsTracker.metrics();
        List<WriteJobStatsTracker> trackers = new ArrayList<>();
        trackers.add(new BasicWriteJobStatsTracker(new SerializableConfiguration(hadoopConf), metrics));
        Map<Map<String, String>, String> noCustomLocations = Map$.MODULE$.empty();
        FileFormatWriter.OutputSpec spec = new FileFormatWriter.OutputSpec(output, noCustomLocations, columns);
        SparkPlan batch = unwrapRows ? BatchRowsExec.ofBatch(ds) : null;
        SparkPlan plan = batch;
        if (plan == null) {
            plan = unwrapRows ? BatchRowsExec.unwrap(execution.executedPlan()) : execution.executedPlan();
        }
        FileFormat parquet = new ParquetFileFormat();
        Option<BucketSpec> noBuckets = Option.empty();
        int staticPartitions = FileFormatWriter.write$default$11();
        Function0<BoxedUnit> jobCommitted = FileFormatWriter.write$default$12();
        SparkPlan rows = plan;
        AbstractFunction0<Object> writing = new AbstractFunction0<Object>() {
            @Override
            public Object apply() {
                return FileFormatWriter.write(
                    session, rows, parquet, committer, spec, hadoopConf,
                    seq(partitions), noBuckets, seq(trackers), scalaOptions, staticPartitions, jobCommitted
                );
            }
        };
        // The tasks read some of the session's settings themselves (SQLConf.get on an executor:
        // spark.sql.parquet.datetimeRebaseModeInWrite, ...), from the local properties a Dataset action sets; this
        // call is none, so set them as one does (df.write, the streaming sink's batch): a sink called outside a
        // stream wrote with Spark's defaults. A plan planned here runs as a query execution of its own, as df.write
        // runs it: its end tells the session's listeners (an Observation on the DataFrame waited for ever, the SQL
        // UI did not show the write). A foreachBatch batch is the stream's execution's rows, not planned again.
        if (batch != null) {
            SQLExecution.withSQLConfPropagated(session, writing);
        } else {
            SQLExecution.withNewExecutionId(execution, Option.apply("parquet-sink write"), writing);
        }
        return metrics.apply("numOutputRows").value();
    }

    /** Whether {@code session}'s {@code spark.sql.streaming.commitProtocolClass} is a manifest protocol. */
    public static boolean writesManifest(SparkSession session) {
        return committer(session.sessionState(), "probe", "file:/") instanceof ManifestFileCommitProtocol;
    }

    /**
     * Whether this Spark has every member {@link #write} calls with the signature it was compiled against (checked
     * by reflection: a missing one would fail only when the batch runs).
     */
    public static boolean usable() {
        try {
            FileFormatWriter.class.getMethod(
                "write", SparkSession.class, SparkPlan.class, FileFormat.class, FileCommitProtocol.class,
                FileFormatWriter.OutputSpec.class, Configuration.class, Seq.class, Option.class, Seq.class, Map.class,
                int.class, Function0.class
            );
            FileFormatWriter.class.getMethod("write$default$11");
            FileFormatWriter.class.getMethod("write$default$12");
            FileFormatWriter.OutputSpec.class.getConstructor(String.class, Map.class, Seq.class);
            FileStreamSinkLog.class.getConstructor(int.class, org.apache.spark.sql.SparkSession.class, String.class, Option.class);
            ManifestFileCommitProtocol.class.getMethod("setupManifestOptions", FileStreamSinkLog.class, long.class);
            BasicWriteJobStatsTracker.class.getMethod("metrics");
            BasicWriteJobStatsTracker.class.getConstructor(SerializableConfiguration.class, Map.class);
            SessionState.class.getMethod("newHadoopConfWithOptions", Map.class);
            SQLExecution.class.getMethod("withSQLConfPropagated", SparkSession.class, Function0.class);
            SQLExecution.class.getMethod("withNewExecutionId", QueryExecution.class, Option.class, Function0.class);
            Dataset.class.getMethod("sparkSession");
            Dataset.class.getMethod("queryExecution");
            return true;
        } catch (NoSuchMethodException | LinkageError e) {
            return false;
        }
    }

    private static FileCommitProtocol committer(SessionState state, String jobId, String output) {
        String name = state.conf().streamingFileCommitProtocolClass();
        return FileCommitProtocol.instantiate(name, jobId, output, false);
    }

    private static <T> Seq<T> seq(List<T> items) {
        return CollectionConverters.asScala(items).toList();
    }
}
