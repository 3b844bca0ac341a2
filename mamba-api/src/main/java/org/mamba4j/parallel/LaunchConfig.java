package org.mamba4j.parallel;

import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import org.mamba4j.Device;

/**
 * Where this process is in a multi-process launch, in torchrun's convention: {@code RANK} (this process's rank),
 * {@code WORLD_SIZE} (processes in the job), {@code LOCAL_RANK} (its index on this host = its GPU ordinal),
 * {@code MASTER_ADDR}/{@code MASTER_PORT} (where rank 0 listens for the rendezvous). torchrun, SLURM scripts and
 * mpirun wrappers set them; {@code MAMBA4J_DIST_TIMEOUT_SECONDS} (default 300) bounds every wait — the rendezvous and
 * each collective.
 *
 * @param rank       this process's rank, in {@code [0, worldSize)}
 * @param worldSize  processes (ranks) in the job
 * @param localRank  index on this host (the CUDA ordinal of its GPU)
 * @param masterAddr host of rank 0
 * @param masterPort TCP port rank 0 listens on
 * @param timeout    the longest any rank waits for the others
 */
public record LaunchConfig(int rank, int worldSize, int localRank, String masterAddr, int masterPort, Duration timeout) {
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(300);
    /** The largest WORLD_SIZE taken (rank 0 of a TCP rendezvous keeps a connection per rank). */
    public static final int MAX_WORLD_SIZE = 1 << 20;

    public LaunchConfig {
        if (worldSize < 1 || worldSize > MAX_WORLD_SIZE)
            throw new IllegalArgumentException("WORLD_SIZE = " + worldSize + " must be in [1, " + MAX_WORLD_SIZE + "]");
        if (rank < 0 || rank >= worldSize)
            throw new IllegalArgumentException("RANK = " + rank + " must be in [0, WORLD_SIZE = " + worldSize + ")");
        if (localRank < 0) throw new IllegalArgumentException("LOCAL_RANK = " + localRank + " must be >= 0");
        Objects.requireNonNull(masterAddr, "masterAddr");
        if (masterAddr.isBlank()) throw new IllegalArgumentException("MASTER_ADDR is empty");
        if (masterPort < 1 || masterPort > 65535)
            throw new IllegalArgumentException("MASTER_PORT = " + masterPort + " must be in [1, 65535]");
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isNegative() || timeout.isZero()) throw new IllegalArgumentException("timeout " + timeout + " must be > 0");
    }

    /** From this process's environment (torchrun's variables). */
    public static LaunchConfig fromEnvironment() {
        return fromEnvironment(System.getenv());
    }

    /**
     * From a map of torchrun's variables: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are required, LOCAL_RANK
     * defaults to RANK, MAMBA4J_DIST_TIMEOUT_SECONDS to 300.
     *
     * @throws IllegalArgumentException naming a variable that is missing or not a valid number
     */
    public static LaunchConfig fromEnvironment(Map<String, String> env) {
        Objects.requireNonNull(env, "env");
        int rank = integer(env, "RANK", null);
        int world = integer(env, "WORLD_SIZE", null);
        int local = integer(env, "LOCAL_RANK", rank);
        String addr = env.get("MASTER_ADDR");
        if (addr == null) throw new IllegalArgumentException(missing("MASTER_ADDR"));
        int port = integer(env, "MASTER_PORT", null);
        int seconds = integer(env, "MAMBA4J_DIST_TIMEOUT_SECONDS", (int) DEFAULT_TIMEOUT.toSeconds());
        if (seconds < 1) throw new IllegalArgumentException("MAMBA4J_DIST_TIMEOUT_SECONDS = " + seconds + " must be >= 1");
        return new LaunchConfig(rank, world, local, addr, port, Duration.ofSeconds(seconds));
    }

    /** The same launch with another timeout. */
    public LaunchConfig withTimeout(Duration timeout) {
        return new LaunchConfig(rank, worldSize, localRank, masterAddr, masterPort, timeout);
    }

    /** This process's GPU: CUDA device {@code localRank}. */
    public Device localDevice() {
        return Device.cuda(localRank);
    }

    private static int integer(Map<String, String> env, String name, Integer fallback) {
        String v = env.get(name);
        if (v == null) {
            if (fallback == null) throw new IllegalArgumentException(missing(name));
            return fallback;
        }
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + " = '" + v + "' is not an integer");
        }
    }

    private static String missing(String name) {
        return "the environment variable " + name + " is not set: launch with torchrun (or set RANK, WORLD_SIZE, "
                + "LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or use the in-process form (DataParallelTrainer.inProcess)";
    }
}
