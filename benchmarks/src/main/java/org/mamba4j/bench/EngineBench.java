package org.mamba4j.bench;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.lm.Completion;
import org.mamba4j.lm.GenerationRequest;
import org.mamba4j.lm.Generator;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Sampling;

/**
 * The continuous-batching engine under load (issue 11 item 6): N concurrent clients, each submitting requests to one
 * {@link Generator} back to back (a closed loop), prompts and outputs of mixed lengths drawn from a seeded generator
 * (prompts 16/128/512 tokens, outputs 32/128/256 tokens, temperature 0.8 with top-k 50), a random model in the shape of
 * state-spaces/mamba-130m-hf (or {@code --shape tiny} for a quick run). The engine has as many slots as clients.
 * For each client count it prints aggregate generated tokens/s and the percentiles of the time to first token, the
 * time between a request's tokens and the request latency — all as a client sees them (submit to callback).
 *
 * <pre>java ... org.mamba4j.bench.EngineBench [--device cpu|cuda] [--dtype BF16] [--shape 130m|tiny]
 *     [--clients 1,16,64,256] [--requests N]   (requests per client, default 4)</pre>
 */
public final class EngineBench {
    private static final int VOCAB = 50280;
    private static final int[] PROMPTS = {16, 128, 512}, OUTPUTS = {32, 128, 256};

    private EngineBench() {}

    /** One request's timeline, in nanoseconds since its submission. */
    private static final class Timeline {
        final long submitted = System.nanoTime();
        final List<Long> tokens = new ArrayList<>();
        long done;
    }

    public static void main(String[] args) throws Exception {
        Device device = Device.cpu();
        DType dtype = null;
        String shape = "130m";
        int[] clients = {1, 16, 64, 256};
        int requests = 4;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--device" -> device = args[++i].equals("cuda") ? Device.cuda(0) : Device.cpu();
                case "--dtype" -> dtype = DType.valueOf(args[++i]);
                case "--shape" -> shape = args[++i];
                case "--clients" -> clients = Arrays.stream(args[++i].split(",")).mapToInt(Integer::parseInt).toArray();
                case "--requests" -> requests = Integer.parseInt(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (dtype == null) dtype = device.isCpu() ? DType.F32 : DType.BF16;
        Mamba1Config config = shape.equals("tiny") ? Mamba1Config.builder().dModel(64).layers(2).build()
                : Mamba1Config.builder().dModel(768).layers(24).build();
        System.out.printf("# Generator under load — %s, %s, %s shape, %d requests per client%n%n", device, dtype, shape, requests);
        System.out.println("| clients | requests | tokens | wall s | tokens/s | TTFT p50 ms | TTFT p99 ms | inter-token p50 ms"
                + " | inter-token p99 ms | latency p50 s | latency p99 s |");
        System.out.println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        try (MambaModel model = MambaModel.builder(config).vocabSize(VOCAB).device(device).dtype(dtype).seed(1).build();
             MambaLM lm = new MambaLM(model, VOCAB - 3, null)) {
            for (int n : clients) run(lm, n, requests);
        }
    }

    private static void run(MambaLM lm, int clients, int requests) throws Exception {
        try (Generator gen = Generator.builder(lm).slots(clients).maxQueued(2 * clients).maxPromptTokens(1024).maxNewTokens(512).build()) {
            // Warm-up: one request of each output length through the same engine (graph capture, workspaces).
            for (int out : OUTPUTS) gen.generate(new int[] {1, 2, 3}, Sampling.greedy().maxNewTokens(out)).get();
            List<Timeline> lines = java.util.Collections.synchronizedList(new ArrayList<>());
            ExecutorService pool = Executors.newFixedThreadPool(clients);
            long t0 = System.nanoTime();
            List<Future<?>> work = new ArrayList<>();
            for (int c = 0; c < clients; c++) {
                final Random rng = new Random(1000 + c);
                work.add(pool.submit(() -> {
                    for (int r = 0; r < requests; r++) {
                        int[] prompt = new int[PROMPTS[rng.nextInt(PROMPTS.length)]];
                        for (int i = 0; i < prompt.length; i++) prompt[i] = rng.nextInt(VOCAB - 3);
                        Sampling s = Sampling.ofTemperature(0.8).topK(50).seed(rng.nextLong())
                                .maxNewTokens(OUTPUTS[rng.nextInt(OUTPUTS.length)]);
                        Timeline line = new Timeline();
                        CompletableFuture<Completion> done = gen.submit(GenerationRequest.ofTokens(prompt, s)
                                .listener((token, text) -> line.tokens.add(System.nanoTime() - line.submitted))).result();
                        done.join();
                        line.done = System.nanoTime() - line.submitted;
                        lines.add(line);
                    }
                    return null;
                }));
            }
            for (Future<?> f : work) f.get();
            double wall = (System.nanoTime() - t0) / 1e9;
            pool.shutdown();
            report(clients, lines, wall);
        }
    }

    private static void report(int clients, List<Timeline> lines, double wall) {
        List<Double> ttft = new ArrayList<>(), gaps = new ArrayList<>(), latency = new ArrayList<>();
        long tokens = 0;
        for (Timeline l : lines) {
            tokens += l.tokens.size();
            if (!l.tokens.isEmpty()) ttft.add(l.tokens.get(0) / 1e6);
            for (int i = 1; i < l.tokens.size(); i++) gaps.add((l.tokens.get(i) - l.tokens.get(i - 1)) / 1e6);
            latency.add(l.done / 1e9);
        }
        System.out.printf("| %d | %d | %d | %.1f | %.0f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |%n", clients, lines.size(), tokens,
                wall, tokens / wall, pct(ttft, 50), pct(ttft, 99), pct(gaps, 50), pct(gaps, 99), pct(latency, 50), pct(latency, 99));
    }

    private static double pct(List<Double> v, double p) {
        if (v.isEmpty()) return Double.NaN;
        double[] a = v.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return a[Math.min(a.length - 1, (int) Math.ceil(p / 100 * a.length) - 1)];
    }
}
