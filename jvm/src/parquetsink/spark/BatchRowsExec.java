package parquetsink.spark;

import java.io.Serializable;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.ExpressionSet;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Statistics;
import org.apache.spark.sql.catalyst.plans.physical.Partitioning;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.streaming.SparkDataStream;
import org.apache.spark.sql.execution.LogicalRDD$;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.RDDScanExec;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.WholeStageCodegenExec;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.collection.Iterator;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;

/**
 * The rows of a {@code foreachBatch} micro-batch, handed to Spark's writer as the streaming plan produced them.
 *
 * <p>Spark's {@code ForeachBatchSink} wraps a batch's rows ({@code queryExecution.toRdd} of the streaming plan) in a
 * {@code LogicalRDD}, which plans as {@code RDDScanExec}: that node copies every row through an
 * {@code UnsafeProjection} (in whole-stage code or not), because an {@code RDD[InternalRow]} may come from anywhere.
 * Spark's own file sink gives {@code FileFormatWriter.write} the streaming plan itself, without that copy. For a
 * plan that is exactly such a scan ({@link #unwrap}), this node returns the same RDD, with the scan's output,
 * partitioning and ordering; a row that is not an {@code UnsafeRow} (an RDD built elsewhere) is still projected,
 * so every consumer of the rows (the writer, the sort Spark adds for partition columns) gets what it got before.
 * {@link #withoutRowCopy} does the same below one node (the Arrow writer path's {@code mapInArrow}).
 *
 * <p>Compiled against Spark 4 (Scala 2.13); {@link #usable} tells whether this Spark leaves no abstract method of
 * the node unimplemented (the parquet-sink Spark writer path checks it once per SparkContext, see
 * {@code parquet_sink/write/manifest_write.py}). Built by {@code jvm/build.sh}.
 */
public final class BatchRowsExec extends SparkPlan {
    private final Seq<Attribute> output;
    private final RDD<InternalRow> rows;
    private final Partitioning partitioning;
    private final Seq<SortOrder> ordering;

    public BatchRowsExec(Seq<Attribute> output, RDD<InternalRow> rows, Partitioning partitioning, Seq<SortOrder> ordering) {
        this.output = output;
        this.rows = rows;
        this.partitioning = partitioning;
        this.ordering = ordering;
    }

    /** {@code plan} itself unless it is a scan of an existing RDD (in whole-stage code or not): then this node. */
    public static SparkPlan unwrap(SparkPlan plan) {
        SparkPlan scan = plan instanceof WholeStageCodegenExec ? ((WholeStageCodegenExec) plan).child() : plan;
        if (!(scan instanceof RDDScanExec)) {
            return plan;
        }
        RDDScanExec existing = (RDDScanExec) scan;
        return new BatchRowsExec(existing.output(), existing.rdd(), existing.outputPartitioning(), existing.outputOrdering());
    }

    /**
     * {@code ds}'s rows as this node, straight from its plan when that is a scan of an existing RDD (a
     * {@code foreachBatch} batch) and no cached data stands in for it: the node {@link #unwrap} makes of {@code ds}'s
     * physical plan (planning gives such a {@code LogicalRDD} an {@code RDDScanExec} of the same output, RDD,
     * partitioning and ordering), without running the optimizer and planner over it (~5 ms a batch). Null for any
     * other plan, and for a batch the caller persisted (its plan reads the cache: the rows it already computed).
     */
    public static SparkPlan ofBatch(org.apache.spark.sql.classic.Dataset<?> ds) {
        LogicalPlan plan = ds.queryExecution().withCachedData();
        if (!(plan instanceof LogicalRDD) || plan.isStreaming()) {
            return null;
        }
        LogicalRDD scan = (LogicalRDD) plan;
        return new BatchRowsExec(scan.output(), scan.rdd(), scan.outputPartitioning(), scan.outputOrdering());
    }

    /**
     * {@code ds} computed without the scan's copy of every row where its physical plan is one node directly over
     * such a scan (the Arrow writer path's {@code mapInArrow} over a batch): a Dataset over that node's RDD, the
     * scan replaced by this node; else {@code ds} itself. The node's own output (a few status rows) is copied once by
     * the returned Dataset's scan. The node is planned as {@code ds}'s query planned it, with the session's settings
     * at this call. A Spark whose {@code LogicalRDD} or {@code Dataset} differs from the one this class is built
     * against gets {@code ds} itself.
     */
    public static Dataset<Row> withoutRowCopy(Dataset<Row> ds) {
        try {
            return overBatchRows(ds);
        } catch (LinkageError e) {  // a constructor or method of another signature in this Spark
            return ds;
        }
    }

    private static Dataset<Row> overBatchRows(Dataset<Row> ds) {
        org.apache.spark.sql.classic.Dataset<Row> classic = (org.apache.spark.sql.classic.Dataset<Row>) ds;
        SparkPlan plan = classic.queryExecution().executedPlan();
        if (plan.children().size() != 1) {
            return ds;
        }
        SparkPlan scan = plan.children().head();
        SparkPlan rows = unwrap(scan);
        if (rows == scan) {
            return ds;
        }
        SparkPlan node = plan.withNewChildren(
            scala.jdk.javaapi.CollectionConverters.asScala(java.util.Collections.singletonList(rows)).toList());
        SparkSession session = classic.sparkSession();
        LogicalRDD$ logical = LogicalRDD$.MODULE$;
        Option<Statistics> noStatistics = Option.empty();
        Option<ExpressionSet> noConstraints = Option.empty();
        Option<SparkDataStream> noStream = Option.empty();
        LogicalRDD result = new LogicalRDD(node.output(), node.execute(), logical.apply$default$3(), logical.apply$default$4(),
            false, noStream, session, noStatistics, noConstraints, false);
        return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(session, result);
    }

    /** Whether every abstract method this class inherits has an implementation in this Spark. */
    public static boolean usable() {
        Deque<Class<?>> types = new ArrayDeque<>();
        types.add(BatchRowsExec.class);
        while (!types.isEmpty()) {
            Class<?> type = types.pop();
            for (Method method : type.getDeclaredMethods()) {
                if (Modifier.isAbstract(method.getModifiers()) && !implemented(method)) {
                    return false;
                }
            }
            if (type.getSuperclass() != null) {
                types.add(type.getSuperclass());
            }
            types.addAll(Arrays.asList(type.getInterfaces()));
        }
        return true;
    }

    private static boolean implemented(Method method) {
        for (Class<?> type = BatchRowsExec.class; type != null; type = type.getSuperclass()) {
            try {
                Method found = type.getDeclaredMethod(method.getName(), method.getParameterTypes());
                if (!Modifier.isAbstract(found.getModifiers())) {
                    return true;
                }
            } catch (NoSuchMethodException e) {
                // not declared here: look further up
            }
        }
        try {  // a default method of an interface
            return !Modifier.isAbstract(BatchRowsExec.class.getMethod(method.getName(), method.getParameterTypes()).getModifiers());
        } catch (NoSuchMethodException e) {
            return false;
        }
    }

    @Override
    public Seq<Attribute> output() {
        return output;
    }

    @Override
    public Partitioning outputPartitioning() {
        return partitioning;
    }

    @Override
    public Seq<SortOrder> outputOrdering() {
        return ordering;
    }

    @Override
    public RDD<InternalRow> doExecute() {
        return rows.mapPartitionsInternal(new AsUnsafe(schema()), true, scala.reflect.ClassTag$.MODULE$.apply(InternalRow.class));
    }

    @Override
    public Seq<SparkPlan> children() {
        return scala.jdk.javaapi.CollectionConverters.asScala(java.util.Collections.<SparkPlan>emptyList()).toList();
    }

    @Override
    public SparkPlan withNewChildrenInternal(IndexedSeq<SparkPlan> children) {
        return this;
    }

    @Override
    public int productArity() {
        return 4;
    }

    @Override
    public Object productElement(int n) {
        switch (n) {
            case 0: return output;
            case 1: return rows;
            case 2: return partitioning;
            case 3: return ordering;
            default: throw new IndexOutOfBoundsException(String.valueOf(n));
        }
    }

    @Override
    public boolean canEqual(Object other) {
        return other instanceof BatchRowsExec;
    }

    /** A partition's rows as they are, each one that is not an {@code UnsafeRow} projected to one. */
    private static final class AsUnsafe extends scala.runtime.AbstractFunction1<Iterator<InternalRow>, Iterator<InternalRow>>
            implements Serializable {
        private static final long serialVersionUID = 1L;
        private final StructType schema;

        AsUnsafe(StructType schema) {
            this.schema = schema;
        }

        @Override
        public Iterator<InternalRow> apply(Iterator<InternalRow> partition) {
            return new scala.collection.AbstractIterator<InternalRow>() {
                private UnsafeProjection projection;

                @Override
                public boolean hasNext() {
                    return partition.hasNext();
                }

                @Override
                public InternalRow next() {
                    InternalRow row = partition.next();
                    if (row instanceof UnsafeRow) {
                        return row;
                    }
                    if (projection == null) {
                        projection = UnsafeProjection.create(schema);
                    }
                    return projection.apply(row);
                }
            };
        }
    }
}
