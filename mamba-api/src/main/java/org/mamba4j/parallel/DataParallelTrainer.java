package org.mamba4j.parallel;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.channels.FileChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.IntFunction;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.mamba4j.BackwardOptions;
import org.mamba4j.CheckpointException;
import org.mamba4j.GemmMode;
import org.mamba4j.LinearHead;
import org.mamba4j.MambaModel;
import org.mamba4j.OptimizerState;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;

/**
 * Data-parallel training: one {@link Trainer} replica per device (or per rank), each on its shard of the global batch,
 * their gradients summed by a {@link Communicator} before every optimizer step — so every replica takes the same
 * AdamW step and the weights stay identical on every rank.
 *
 * <pre>{@code
 * // several replicas of one process (CPU threads, or one GPU each): one thread per replica
 * try (DataParallelTrainer dp = DataParallelTrainer.inProcess(replicas)) {   // replicas: N Trainers of batch b
 *     StepResult r = dp.stepMse(inputs, targets);   // the global batch: N·b sequences, replica i gets rows [i·b, (i+1)·b)
 * }
 * // one process per GPU, launched by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
 * LaunchConfig launch = LaunchConfig.fromEnvironment();
 * try (NcclCommunicator nccl = NcclCommunicator.connect(launch, launch.localDevice());
 *      DataParallelTrainer dp = DataParallelTrainer.of(trainerOnThatGpu, nccl)) {
 *     StepResult r = dp.stepMse(myShardInputs, myShardTargets);          // this rank's b sequences
 * }
 * }</pre>
 *
 * <p><b>Batches.</b> Every call takes this process's part of the global batch: {@link #localBatch()} =
 * (local replicas) × (the replicas' batch) sequences, split in order over the local replicas (rank order). With one
 * replica per process that is the rank's shard. The global batch is {@link #globalBatch()} = worldSize × batch.
 *
 * <p><b>Semantics = one trainer.</b> Each replica runs its shard as a micro-batch with its gradient scaled by
 * {@code 1/worldSize} (so the fused losses' gradient is the mean of the shards' means, as PyTorch DDP's), nothing is
 * exchanged for {@link BackwardOptions#accumulate()} calls, and a step sums the accumulated gradients over the ranks
 * and runs each replica's own clip + AdamW on that sum: global-norm clipping sees the combined gradient, the
 * learning-rate schedule, weight decay and the non-finite policy are the replicas' (a micro-batch with a non-finite
 * loss on any rank makes every rank skip the step). The optimiser state is <em>replicated</em>: every rank keeps all
 * the moments and updates all the weights — no parameter exchange after a step and the simplest proof of identical
 * weights, at 2 floats of moments per parameter per device (sharding them, ZeRO-1, would save that memory for an
 * extra all-gather of the weights each step; not done). Reported losses and accuracies are over the global batch
 * (weighted by the counted targets); the gradient norm is the combined gradient's. Output heads and loss scaling
 * ({@link org.mamba4j.LossScaler}) work as on one trainer: the replicas' scaled gradients are summed and each replica
 * unscales, skips and moves its scale on the same combined gradient, so the scales stay equal.
 *
 * <p><b>Determinism.</b> With {@link Reduction#RANK_ORDER} (the default when the replicas' models run
 * {@link GemmMode#DETERMINISTIC}) the sum is {@code ((g0 + g1) + g2) + …}, rank after rank, in f32, identically on
 * every rank and by every communicator. Each g_r is a replica's gradient of a batch-b shard, computed from a zero
 * gradient by the same kernels as any trainer of batch b. So N replicas give weights bit-identical to ONE trainer of
 * batch b that, for each global batch, computes each shard's gradient from zero ({@code zeroGrad}, the shard with
 * {@code accumulate().scale(1/N)}, {@link Trainer#gradients()}), adds the N gradients in rank order
 * ({@link Trainer#setGradients}) and steps — for any N, any split of the ranks into processes, any communicator
 * (tested bitwise on the CPU for 1–4 replicas, Mamba-1 and Mamba-3, MSE, cross-entropy and language-model losses,
 * with clipping). Two nearby statements are <em>not</em> bitwise: one trainer of batch N·b in one call sums the weight
 * gradients over all N·b rows inside each product (it agrees to f32 rounding), and one trainer accumulating the N
 * shards as micro-batches adds the conv and embedding gradients row by row into the running sum, {@code ((G0 + a) + b)}
 * rather than {@code G0 + (a + b)}. {@link GemmMode#DETERMINISTIC} is what makes the forward batch-invariant; on CUDA
 * the guarantee holds per GPU model, as for one trainer. With accumulated micro-batches between steps, g_r is rank
 * r's own accumulation of its micro-batches.
 *
 * <p><b>Checkpoints.</b> {@link #saveCheckpoint} is a collective: rank 0 writes, every rank waits for it. Each save
 * goes to a new folder and then an atomic replace of the {@code LATEST} pointer, so a rank or process killed at
 * any moment leaves the last complete checkpoint readable ({@link #loadCheckpoint}). Loading checks every piece
 * (the {@code LATEST} pointer, the files, their shapes against the replicas) before it changes a replica: a corrupt,
 * hostile or mismatched checkpoint throws {@link CheckpointException} and leaves the replicas as they were.
 *
 * <p><b>Faults.</b> A rank that dies or hangs makes the others' next collective throw {@link CommunicatorException}
 * within the communicator's timeout; the local replicas' threads are stopped with it (the trainer aborts its
 * communicators), and the trainer is unusable afterwards.
 *
 * <p>Not thread-safe: one thread drives it (it runs the local replicas on threads of its own). The trainers stay the
 * caller's (close them after this); communicators made by {@link #inProcess} are closed with it.
 */
public final class DataParallelTrainer implements AutoCloseable {
    private static final String LATEST = "LATEST";
    private static final String MODEL = "model.safetensors", OPTIMIZER = "optimizer.safetensors", HEAD = "head.safetensors",
            LOSS_SCALER = "loss-scaler.txt";
    private static final Pattern STEP_FOLDER = Pattern.compile("step-[0-9]{1,19}");
    private static final Pattern DECIMAL = Pattern.compile("[0-9]{1,40}(\\.[0-9]{1,40})?([eE][-+]?[0-9]{1,3})?");  // a loss scale

    private final List<Trainer> replicas;
    private final List<Communicator> comms;
    private final boolean ownsCommunicators;
    private final Reduction reduction;
    private final int world, batch, seqLen;
    private final ExecutorService pool;  // null with one local replica: it runs on the caller's thread
    private final boolean[] nonFiniteLoss;  // per local replica, since the last step
    private volatile String failed;

    private DataParallelTrainer(List<Trainer> replicas, List<? extends Communicator> comms, Reduction reduction, boolean owns) {
        Objects.requireNonNull(replicas, "replicas");
        Objects.requireNonNull(comms, "communicators");
        if (replicas.isEmpty()) throw new IllegalArgumentException("no replicas");
        if (replicas.size() != comms.size())
            throw new IllegalArgumentException(replicas.size() + " replicas but " + comms.size() + " communicators");
        this.replicas = List.copyOf(replicas);
        this.comms = List.copyOf(comms);
        this.ownsCommunicators = owns;
        Trainer first = replicas.get(0);
        this.world = comms.get(0).worldSize();
        this.batch = first.batch();
        this.seqLen = first.seqLen();
        this.reduction = reduction != null ? reduction
                : first.model().gemmMode() == GemmMode.DETERMINISTIC ? Reduction.RANK_ORDER : Reduction.FASTEST;
        Set<Integer> ranks = new HashSet<>();
        Set<Trainer> distinct = Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (int i = 0; i < replicas.size(); i++) {
            Trainer t = replicas.get(i);
            Communicator c = comms.get(i);
            if (!distinct.add(t)) throw new IllegalArgumentException("replica " + i + " is listed twice");
            if (c.worldSize() != world)
                throw new IllegalArgumentException("communicator " + i + " has world size " + c.worldSize() + ", the first " + world);
            if (!ranks.add(c.rank())) throw new IllegalArgumentException("two local replicas have rank " + c.rank());
            if (i > 0 && c.rank() <= comms.get(i - 1).rank())
                throw new IllegalArgumentException("local replicas must be listed in rank order (rank " + c.rank()
                        + " after rank " + comms.get(i - 1).rank() + ")");
        }
        this.nonFiniteLoss = new boolean[replicas.size()];
        this.pool = replicas.size() == 1 ? null : Executors.newFixedThreadPool(replicas.size(), r -> {
            Thread th = new Thread(r, "mamba4j-data-parallel");
            th.setDaemon(true);
            return th;
        });
        try {
            parallel(this::joinGroup);
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    /** Replicas of one process on one thread each, over a new {@link InProcessCommunicator} group (closed with this). */
    public static DataParallelTrainer inProcess(List<Trainer> replicas) {
        return inProcess(replicas, InProcessCommunicator.DEFAULT_TIMEOUT);
    }

    /** As {@link #inProcess(List)}, each collective waiting at most {@code timeout} for every replica. */
    public static DataParallelTrainer inProcess(List<Trainer> replicas, Duration timeout) {
        Objects.requireNonNull(replicas, "replicas");
        return new DataParallelTrainer(replicas, InProcessCommunicator.group(replicas.size(), timeout), null, true);
    }

    /** This process's one replica, as rank {@code communicator.rank()} (the multi-process form). */
    public static DataParallelTrainer of(Trainer replica, Communicator communicator) {
        return of(List.of(replica), List.of(communicator), null);
    }

    /**
     * This process's replicas with their communicators (replica i is rank {@code communicators.get(i).rank()}, in
     * increasing rank order); {@code reduction} null picks {@link Reduction#RANK_ORDER} for DETERMINISTIC models and
     * {@link Reduction#FASTEST} otherwise. The communicators stay the caller's.
     */
    public static DataParallelTrainer of(List<Trainer> replicas, List<? extends Communicator> communicators, Reduction reduction) {
        return new DataParallelTrainer(replicas, communicators, reduction, false);
    }

    public int worldSize() { return world; }
    /** Sequences per replica (each replica's {@link Trainer#batch()}). */
    public int batch() { return batch; }
    public int seqLen() { return seqLen; }
    /** Sequences each call of this process takes: local replicas × batch. */
    public int localBatch() { return replicas.size() * batch; }
    /** Sequences of one global batch over every rank: worldSize × batch. */
    public int globalBatch() { return world * batch; }
    public Reduction reduction() { return reduction; }
    /** This process's replicas, in rank order. */
    public List<Trainer> replicas() { return replicas; }
    /** The ranks of this process's replicas. */
    public int[] ranks() { return comms.stream().mapToInt(Communicator::rank).toArray(); }
    /** The first local replica's model (every rank holds the same weights). */
    public MambaModel model() { return replicas.get(0).model(); }
    public long stepCount() { return replicas.get(0).stepCount(); }

    // ---- training calls: each takes this process's localBatch() sequences ----

    /** Forward + backward of {@code dOutput} + (global) clip + AdamW. */
    public StepResult step(float[] inputs, float[] dOutput) {
        return step(inputs, dOutput, BackwardOptions.step());
    }

    public StepResult step(float[] inputs, float[] dOutput, BackwardOptions options) {
        int in = batch * seqLen * model().inputWidth(), out = batch * seqLen * replicas.get(0).outputWidth();
        checkLength("inputs", inputs, in);
        checkLength("dOutput", dOutput, out);
        return run(options, (t, i, o) -> t.step(slice(inputs, i, in), slice(dOutput, i, out), o));
    }

    /** Forward + MSE + backward (+ the synchronised step). */
    public StepResult stepMse(float[] inputs, float[] targets) {
        return stepMse(inputs, targets, BackwardOptions.step());
    }

    public StepResult stepMse(float[] inputs, float[] targets, BackwardOptions options) {
        int in = batch * seqLen * model().inputWidth(), out = batch * seqLen * replicas.get(0).outputWidth();
        checkLength("inputs", inputs, in);
        checkLength("targets", targets, out);
        return run(options, (t, i, o) -> t.stepMse(slice(inputs, i, in), slice(targets, i, out), o));
    }

    /** Forward + the replicas' linear head + softmax cross-entropy + backward (+ the synchronised step). */
    public StepResult stepCrossEntropy(float[] inputs, int[] targets) {
        return stepCrossEntropy(inputs, targets, BackwardOptions.step());
    }

    public StepResult stepCrossEntropy(float[] inputs, int[] targets, BackwardOptions options) {
        int in = batch * seqLen * model().inputWidth(), tg = batch * seqLen;
        checkLength("inputs", inputs, in);
        checkLength("targets", targets, tg);
        return run(options, (t, i, o) -> t.stepCrossEntropy(slice(inputs, i, in), slice(targets, i, tg), o));
    }

    /** Language models: token ids + next-token targets [localBatch, T] (+ the synchronised step). */
    public StepResult stepTokens(int[] ids, int[] targets) {
        return stepTokens(ids, targets, BackwardOptions.step());
    }

    public StepResult stepTokens(int[] ids, int[] targets, BackwardOptions options) {
        int n = batch * seqLen;
        checkLength("ids", ids, n);
        checkLength("targets", targets, n);
        return run(options, (t, i, o) -> t.stepTokens(slice(ids, i, n), slice(targets, i, n), o));
    }

    /** Sums the gradients accumulated so far over the ranks, then clip + AdamW on every replica (a collective). */
    public StepResult optimizerStep() {
        checkUsable();
        List<StepResult> rs = parallel(i -> finish(i, null, true));
        return rs.get(0);
    }

    /** Discards every local replica's accumulated gradient (local: every rank should call it at the same point). */
    public void zeroGrad() {
        checkUsable();
        for (int i = 0; i < replicas.size(); i++) {
            replicas.get(i).zeroGrad();
            nonFiniteLoss[i] = false;
        }
    }

    // ---- checkpoints ----

    /**
     * A collective: rank 0 writes the model, the optimizer state, (with one: cross-entropy or output head) the head and
     * (with one) the loss scaler's state into {@code dir/step-<n>/}, then atomically points {@code dir/LATEST} at it and deletes older step folders; every
     * rank returns once rank 0 is done. Returns the folder written.
     */
    public Path saveCheckpoint(Path dir) {
        Objects.requireNonNull(dir, "dir");
        checkUsable();
        long step = stepCount();
        Path folder = dir.resolve("step-" + step);
        parallel(i -> {
            if (comms.get(i).rank() == 0) {
                Trainer t = replicas.get(i);
                try {
                    Files.createDirectories(folder);
                    t.model().save(folder.resolve(MODEL));
                    t.exportOptimizerState().save(folder.resolve(OPTIMIZER));
                    if (hasHead(t)) t.head().save(folder.resolve(HEAD));
                    if (t.lossScaler() != null)
                        writeAtomically(folder.resolve(LOSS_SCALER), t.lossScale() + " " + t.lossScalerCleanSteps() + "\n");
                    writeLatest(dir, folder.getFileName().toString());
                    deleteOlder(dir, folder.getFileName().toString());
                } catch (IOException e) {
                    throw new UncheckedIOException("rank 0 could not write the checkpoint " + folder, e);
                }
            }
            comms.get(i).allGather(new double[] {step});  // every rank waits for rank 0's save
            return null;
        });
        return folder;
    }

    /**
     * Loads the checkpoint {@code dir/LATEST} points at into every local replica (each rank reads the files itself;
     * no collective). Returns its step count. Every file is read and checked against the replicas before the first
     * replica changes (the model file by {@link MambaModel#loadWeights}, which validates it whole before it writes a
     * weight), so a failed load leaves every replica as it was.
     *
     * @throws CheckpointException when {@code dir} holds no complete checkpoint that fits the replicas: {@code LATEST}
     *     missing, not a step folder's name or naming no folder ({@link #latestCheckpoint}); the model, optimizer
     *     state, head (with one) or loss-scaler state (with one) missing, corrupt, or of another shape
     */
    public long loadCheckpoint(Path dir) {
        Objects.requireNonNull(dir, "dir");
        Path folder = latestCheckpoint(dir);
        Trainer first = replicas.get(0);
        OptimizerState state = OptimizerState.load(folder.resolve(OPTIMIZER));
        LinearHead head = hasHead(first) ? LinearHead.load(folder.resolve(HEAD)) : null;
        LossScalerState scaler = first.lossScaler() != null ? readLossScaler(folder.resolve(LOSS_SCALER)) : null;
        for (Trainer t : replicas) checkFits(t, first, state, head, folder);
        // the model file last: loadWeights checks all of it before it changes a weight, and the replicas have one shape
        first.model().loadWeights(folder.resolve(MODEL));
        for (Trainer t : replicas) {
            if (t != first) t.model().loadWeights(folder.resolve(MODEL));
            t.importOptimizerState(state);
            if (head != null) t.loadHead(head);
            if (scaler != null) t.restoreLossScaler(scaler.scale(), scaler.cleanSteps());
        }
        return state.step();
    }

    /**
     * The folder {@code dir/LATEST} names (the last complete checkpoint).
     *
     * @throws CheckpointException when {@code LATEST} is missing, not a small text file naming a step folder
     *     ({@code step-<n>}, nothing else: no path), or names a folder that does not exist
     */
    public static Path latestCheckpoint(Path dir) {
        Objects.requireNonNull(dir, "dir");
        Path latest = dir.resolve(LATEST);
        String name = readSmallText(latest, 64, "the checkpoint pointer");
        if (!STEP_FOLDER.matcher(name).matches())
            throw new CheckpointException(latest + " does not name a step folder (step-<n>): '" + printable(name) + "'");
        Path folder = dir.resolve(name);
        if (!Files.isDirectory(folder)) throw new CheckpointException(latest + " names " + name + ", which is not a folder in " + dir);
        return folder;
    }

    /** Shuts the replica threads down; closes communicators made by {@link #inProcess}. The trainers stay open. */
    @Override
    public void close() {
        if (pool != null) pool.shutdownNow();
        if (ownsCommunicators) comms.forEach(Communicator::close);
    }

    @Override
    public String toString() {
        return "DataParallelTrainer{world " + world + ", local ranks " + java.util.Arrays.toString(ranks()) + ", batch " + batch
                + " per replica, " + reduction + "}";
    }

    // ---- internals ----

    @FunctionalInterface
    private interface ShardCall {
        StepResult apply(Trainer replica, int localIndex, BackwardOptions options);
    }

    /** Every local replica runs its shard as a micro-batch (scaled by 1/world), then the call's collective part. */
    private StepResult run(BackwardOptions options, ShardCall call) {
        Objects.requireNonNull(options, "options");
        checkUsable();
        BackwardOptions micro = BackwardOptions.accumulate().scale(options.scale() / world);
        List<StepResult> rs = parallel(i -> {
            StepResult local = call.apply(replicas.get(i), i, micro);
            if (hasLoss(local) && !Float.isFinite((float) local.loss())) nonFiniteLoss[i] = true;
            return finish(i, local, options.applyOptimizer());
        });
        return rs.get(0);
    }

    /**
     * The collective part of a call on local replica i: the global loss statistics and non-finite flags (one small
     * all-gather), then, when stepping, the gradient sum and the replica's own optimizer step.
     */
    private StepResult finish(int i, StepResult local, boolean step) {
        Trainer t = replicas.get(i);
        Communicator c = comms.get(i);
        boolean hasLoss = local != null && hasLoss(local);
        double counted = hasLoss ? local.counted() : 0;
        double[] mine = {hasLoss ? local.loss() * counted : 0, counted,
                hasLoss && !Double.isNaN(local.accuracy()) ? local.accuracy() * counted : Double.NaN, hasLoss ? 1 : 0,
                nonFiniteLoss[i] ? 1 : 0};
        double[] all = c.allGather(mine);
        double lossSum = 0, countSum = 0, accSum = 0;
        boolean anyLoss = false, anyNonFinite = false;
        for (int r = 0; r < world; r++) {  // rank order: the same doubles on every rank
            lossSum += all[5 * r];
            countSum += all[5 * r + 1];
            accSum += all[5 * r + 2];
            anyLoss |= all[5 * r + 3] != 0;
            anyNonFinite |= all[5 * r + 4] != 0;
        }
        double loss = anyLoss && countSum > 0 ? lossSum / countSum : Double.NaN;
        double acc = anyLoss && countSum > 0 ? accSum / countSum : Double.NaN;
        long counted64 = (long) countSum;
        if (!step)
            return new StepResult(t.stepCount(), false, false, Double.NaN, t.learningRate(), loss, acc, counted64,
                    local != null ? local.lossScale() : 1);
        boolean mineNonFinite = nonFiniteLoss[i];
        nonFiniteLoss[i] = false;
        if (anyNonFinite) {
            // Every rank knows: every rank lets its own optimizer step skip, as one trainer would (a loss scaler backs
            // off everywhere). A rank whose own loss was finite poisons its gradient so that its step sees it too.
            // A gradient too large for a Java array cannot be poisoned: then every rank (the same decision everywhere)
            // discards its gradient without an optimizer step, and a loss scaler does not back off.
            if (t.gradientLength() > Integer.MAX_VALUE - 8) {
                t.zeroGrad();
                return new StepResult(t.stepCount(), false, true, Double.NaN, t.learningRate(), loss, acc, counted64,
                        t.lossScale());
            }
            if (!mineNonFinite) poison(t);
        } else {
            c.sumGradients(t, reduction);
        }
        StepResult s = t.optimizerStep();
        return new StepResult(s.step(), s.optimizerStepped(), s.skipped(), s.gradNorm(), s.learningRate(), loss, acc, counted64,
                s.lossScale());
    }

    /** Makes the next optimizer step of {@code t} skip: a NaN gradient (its norm is not finite). */
    private static void poison(Trainer t) {
        float[] nan = new float[(int) t.gradientLength()];
        java.util.Arrays.fill(nan, Float.NaN);
        t.setGradients(nan);
    }

    /** Whether a trainer has a linear head (cross-entropy or output head) whose weights are trainable tensors. */
    private static boolean hasHead(Trainer t) {
        return t.vocab() > 0 || t.outputHeadWidth() > 0;
    }

    /** A fused loss call (its loss may be NaN: diverged); calls without a loss report NaN and count nothing. */
    private static boolean hasLoss(StepResult r) {
        return !Double.isNaN(r.loss()) || r.counted() > 0;
    }

    /**
     * Joining: every rank checks that the others train the same shapes and step count, then takes rank 0's weights
     * (model and head) — so replicas built from different seeds, or loaded from one checkpoint, start identical.
     */
    private Void joinGroup(int i) {
        Trainer t = replicas.get(i);
        Communicator c = comms.get(i);
        double[] mine = {t.batch(), t.seqLen(), t.gradientLength(), t.parameterNames().size(), t.stepCount(), t.vocab(),
                t.model().inputWidth(), t.outputWidth()};
        double[] all = c.allGather(mine);
        String[] what = {"batch", "seqLen", "gradient length", "trainable tensors", "step count", "head vocabulary", "input width",
                "output width"};
        for (int r = 0; r < world; r++)
            for (int k = 0; k < mine.length; k++)
                if (all[r * mine.length + k] != all[k])
                    throw new IllegalStateException("rank " + r + " has " + what[k] + " " + (long) all[r * mine.length + k]
                            + ", rank 0 " + (long) all[k] + ": every replica must train the same model shape the same way");
        float[] weights = flatWeights(t);
        c.broadcast(weights, 0);
        if (c.rank() != 0) setFlatWeights(t, weights);
        return null;
    }

    private static float[] flatWeights(Trainer t) {
        MambaModel m = t.model();
        List<float[]> parts = new ArrayList<>();
        for (String n : m.parameterNames()) parts.add(m.getParameter(n));
        if (hasHead(t)) {
            parts.add(t.head().weight());
            parts.add(t.head().bias());
        }
        int n = 0;
        for (float[] p : parts) n = Math.addExact(n, p.length);
        float[] flat = new float[n];
        int off = 0;
        for (float[] p : parts) {
            System.arraycopy(p, 0, flat, off, p.length);
            off += p.length;
        }
        return flat;
    }

    private static void setFlatWeights(Trainer t, float[] flat) {
        MambaModel m = t.model();
        int off = 0;
        for (String n : m.parameterNames()) {
            float[] p = new float[m.getParameter(n).length];
            System.arraycopy(flat, off, p, 0, p.length);
            off += p.length;
            m.setParameter(n, p);
        }
        if (hasHead(t)) {
            LinearHead h = t.head();
            float[] w = new float[h.weight().length], b = new float[h.bias().length];
            System.arraycopy(flat, off, w, 0, w.length);
            System.arraycopy(flat, off + w.length, b, 0, b.length);
            t.loadHead(new LinearHead(h.vocab(), h.dModel(), w, b));
        }
    }

    /**
     * Runs {@code task} for every local replica — on the caller's thread for one, on one thread each otherwise — and
     * returns the results in local order. A failure aborts every local communicator (so the other replicas' collectives
     * fail at once rather than wait out the timeout), marks this trainer unusable and is rethrown.
     */
    private <T> List<T> parallel(IntFunction<T> task) {
        try {
            if (pool == null) {
                List<T> one = new ArrayList<>();
                one.add(task.apply(0));
                return one;
            }
            List<Future<T>> fs = new ArrayList<>();
            for (int i = 0; i < replicas.size(); i++) {
                int idx = i;
                fs.add(pool.submit(() -> {
                    try {
                        return task.apply(idx);
                    } catch (RuntimeException | Error e) {
                        abortAll(e);
                        throw e;
                    }
                }));
            }
            List<T> out = new ArrayList<>();
            RuntimeException first = null;
            for (Future<T> f : fs) {
                try {
                    out.add(f.get());
                } catch (ExecutionException e) {
                    RuntimeException r = e.getCause() instanceof RuntimeException re ? re : new IllegalStateException(e.getCause());
                    if (first == null || first instanceof CommunicatorException && !(r instanceof CommunicatorException)) first = r;
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    abortAll(e);
                    throw new CommunicatorException("interrupted while the replicas ran");
                }
            }
            if (first != null) throw first;
            return out;
        } catch (RuntimeException e) {
            if (failed == null) failed = e.toString();
            if (pool == null) abortAll(e);
            throw e;
        }
    }

    private void abortAll(Throwable cause) {
        for (Communicator c : comms) {
            try {
                c.abort(String.valueOf(cause));
            } catch (RuntimeException ignored) {
                // aborting is best effort
            }
        }
    }

    private void checkUsable() {
        if (failed != null)
            throw new IllegalStateException("this data-parallel trainer failed earlier (" + failed + "); restart from the last checkpoint");
    }

    private void checkLength(String what, float[] a, int perReplica) {
        Objects.requireNonNull(a, what);
        long expected = (long) perReplica * replicas.size();
        if (a.length != expected)
            throw new IllegalArgumentException(what + " has " + a.length + " values, expected localBatch (" + localBatch()
                    + ") × the rest = " + expected);
    }

    private void checkLength(String what, int[] a, int perReplica) {
        Objects.requireNonNull(a, what);
        long expected = (long) perReplica * replicas.size();
        if (a.length != expected)
            throw new IllegalArgumentException(what + " has " + a.length + " values, expected localBatch (" + localBatch()
                    + ") × seqLen = " + expected);
    }

    private static float[] slice(float[] a, int index, int n) {
        float[] out = new float[n];
        System.arraycopy(a, index * n, out, 0, n);
        return out;
    }

    private static int[] slice(int[] a, int index, int n) {
        int[] out = new int[n];
        System.arraycopy(a, index * n, out, 0, n);
        return out;
    }

    /** A checkpoint's loss-scaler state: {@code loss-scaler.txt} holds {@code "<scale> <clean steps>\n"}. */
    record LossScalerState(double scale, long cleanSteps) {}

    /**
     * Reads a loss-scaler state file.
     *
     * @throws CheckpointException when it is missing, not two numbers, or its values are out of range (a scale that
     *     is not finite and positive in f32, negative clean steps)
     */
    static LossScalerState readLossScaler(Path file) {
        String text = readSmallText(file, 128, "the loss-scaler state");
        String[] v = text.split(" ", -1);
        if (v.length != 2 || !DECIMAL.matcher(v[0]).matches() || !v[1].matches("[0-9]{1,18}"))
            throw new CheckpointException(file + " is not '<scale> <clean steps>': '" + printable(text) + "'");
        double scale = Double.parseDouble(v[0]);
        long clean = Long.parseLong(v[1]);
        if (!(scale > 0) || Float.isInfinite((float) scale) || (float) scale == 0)
            throw new CheckpointException(file + ": loss scale " + v[0] + " is not finite and positive in f32");
        return new LossScalerState(scale, clean);
    }

    /**
     * A small ASCII text file, trimmed: at most {@code maxBytes} bytes read whatever its size, and only from a regular
     * file (a folder, a pipe or a device is refused: a pipe would block the read).
     */
    private static String readSmallText(Path file, int maxBytes, String what) {
        if (!Files.isRegularFile(file)) throw new CheckpointException(what + " " + file + " is missing or not a regular file");
        byte[] b;
        try (InputStream in = Files.newInputStream(file)) {
            b = in.readNBytes(maxBytes + 1);
        } catch (IOException e) {
            throw new CheckpointException(what + " " + file + " cannot be read: " + e, e);
        }
        if (b.length > maxBytes) throw new CheckpointException(what + " " + file + " is larger than " + maxBytes + " bytes");
        for (byte c : b)
            if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c > 0x7e)
                throw new CheckpointException(what + " " + file + " is not ASCII text");
        return new String(b, StandardCharsets.US_ASCII).trim();
    }

    /** At most 64 characters of a text read from a file, for a message. */
    private static String printable(String s) {
        return s.length() <= 64 ? s : s.substring(0, 64) + "…";
    }

    /**
     * Whether replica {@code t} takes the checkpoint's pieces (as the first replica, whose shape it must have):
     * everything {@link Trainer#importOptimizerState} and {@link Trainer#loadHead} would refuse, refused before any
     * replica changes.
     */
    private static void checkFits(Trainer t, Trainer first, OptimizerState state, LinearHead head, Path folder) {
        MambaModel m = t.model(), m0 = first.model();
        if (!m.config().equals(m0.config()) || m.inputWidth() != m0.inputWidth() || m.vocabSize() != m0.vocabSize()
                || !t.parameterNames().equals(first.parameterNames()))
            throw new IllegalStateException("the local replicas have different model shapes");
        List<String> names = t.parameterNames();
        if (state.names().size() != names.size() || !state.names().containsAll(names))
            throw new CheckpointException(folder.resolve(OPTIMIZER) + " holds moments for " + state.names().size()
                    + " tensors that are not this trainer's " + names.size());
        int rows = t.vocab() > 0 ? t.vocab() : t.outputHeadWidth();
        Set<String> modelTensors = new HashSet<>(m.parameterNames());
        for (String n : names) {
            long expected = modelTensors.contains(n) ? product(m.parameterShape(n))
                    : n.endsWith(".weight") ? (long) rows * m.outputWidth() : rows;  // the head's weight or bias
            long got = state.firstMoment(n).length;
            if (got != expected)
                throw new CheckpointException(folder.resolve(OPTIMIZER) + ": the moments of " + n + " have " + got
                        + " values, this trainer's tensor " + expected);
        }
        if (head != null && (head.vocab() != rows || head.dModel() != m.outputWidth()))
            throw new CheckpointException(folder.resolve(HEAD) + " is a head of [" + head.vocab() + ", " + head.dModel()
                    + "]; this trainer's is [" + rows + ", " + m.outputWidth() + "]");
    }

    private static long product(long[] shape) {
        long n = 1;
        for (long d : shape) n *= d;
        return n;
    }

    /** Writes a small file through a temp file forced to disk and an atomic rename. */
    private static void writeAtomically(Path file, String text) throws IOException {
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING)) {
            ch.write(java.nio.ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8)));
            ch.force(true);
        }
        Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }

    /** Writes LATEST atomically, then forces the folder. */
    private static void writeLatest(Path dir, String name) throws IOException {
        writeAtomically(dir.resolve(LATEST), name + "\n");
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        } catch (IOException ignored) {
            // not every file system lets a folder be forced
        }
    }

    private static void deleteOlder(Path dir, String keep) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            for (Path p : (Iterable<Path>) s::iterator) {
                String n = p.getFileName().toString();
                if (STEP_FOLDER.matcher(n).matches() && !n.equals(keep) && Files.isDirectory(p)) {
                    try (Stream<Path> files = Files.list(p)) {
                        for (Path f : (Iterable<Path>) files::iterator) Files.deleteIfExists(f);
                    }
                    Files.deleteIfExists(p);
                }
            }
        }
    }
}
