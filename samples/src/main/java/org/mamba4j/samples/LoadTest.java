package org.mamba4j.samples;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.mamba4j.lm.Generator;
import org.mamba4j.lm.MambaLM;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Drives a completion server from N concurrent clients over loopback with streamed requests and prints the
 * percentiles of the time to first token, the time between tokens and the request latency, and the aggregate
 * tokens per second. Without {@code --url} it starts a {@link CompletionServer} with the random demo model in this
 * JVM first. Every client sends its requests one after the other; the run is bounded by {@code --requests}.
 *
 * <pre>
 * java -cp samples/target/mamba4j-samples.jar org.mamba4j.samples.LoadTest --clients 8 --requests 4 --max-tokens 64
 * java -cp samples/target/mamba4j-samples.jar org.mamba4j.samples.LoadTest --url http://127.0.0.1:8080 --clients 32
 * </pre>
 */
@Command(name = "load-test", mixinStandardHelpOptions = true, versionProvider = SampleVersion.class,
        description = "Load-test a /v1/completions server over loopback: latency percentiles and tokens/s.")
public final class LoadTest implements Callable<Integer> {
    @Option(names = "--url", description = "The server (http://host:port); default: start the demo server in this JVM.")
    String url;
    @Option(names = "--clients", description = "Concurrent clients, default ${DEFAULT-VALUE}.")
    int clients = 8;
    @Option(names = "--requests", description = "Requests per client, default ${DEFAULT-VALUE}.")
    int requests = 4;
    @Option(names = "--max-tokens", description = "max_tokens of each request, default ${DEFAULT-VALUE}.")
    int maxTokens = 64;
    @Option(names = "--prompt-chars", description = "Length of each prompt in characters, default ${DEFAULT-VALUE}.")
    int promptChars = 200;
    @Option(names = "--temperature", description = "Sampling temperature, default ${DEFAULT-VALUE}.")
    double temperature = 0.8;
    @Option(names = "--slots", description = "Demo server only: decode slots, default ${DEFAULT-VALUE}.")
    int slots = 8;
    @Option(names = "--d-model", description = "Demo server only: model width, default ${DEFAULT-VALUE}.")
    int dModel = 256;
    @Option(names = "--layers", description = "Demo server only: layers, default ${DEFAULT-VALUE}.")
    int layers = 4;
    @Option(names = "--device", description = "Demo server only: cpu, cuda, cuda:N or best (default ${DEFAULT-VALUE}).")
    String device = "cpu";
    @Option(names = "--deterministic", description = "Demo server only: DETERMINISTIC products (our fixed-order kernels, no threaded BLAS).")
    boolean deterministic;

    /** One request's timings (nanoseconds) and token count. */
    record Sample(long firstToken, List<Long> gaps, long total, int tokens, String error) {}

    /** The summary of a run, also for tests. */
    record Report(int ok, int failed, double seconds, long tokens, double[] ttftMs, double[] interTokenMs, double[] latencyMs) {
        double tokensPerSecond() { return tokens / seconds; }
    }

    public static void main(String[] args) {
        if (System.getProperty("org.bytedeco.javacpp.logger") == null) System.setProperty("org.bytedeco.javacpp.logger", "slf4j");
        int code = new CommandLine(new LoadTest()).execute(args);
        if (code != 0) System.exit(code);
    }

    @Override
    public Integer call() throws Exception {
        if (clients < 1 || requests < 1 || maxTokens < 1) throw new IllegalArgumentException("--clients, --requests and --max-tokens must be >= 1");
        if (url != null) {
            print(run(URI.create(url), clients, requests, maxTokens, promptChars, temperature));
            return 0;
        }
        try (MambaLM lm = CompletionServer.loadModel(null, true, dModel, layers, device, "f32", deterministic);
             Generator gen = Generator.builder(lm).slots(slots).maxQueued(Math.max(1024, clients)).build();
             CompletionServer server = new CompletionServer(gen, "mamba4j-demo", new InetSocketAddress("127.0.0.1", 0),
                     CompletionServer.DEFAULT_MAX_BODY_BYTES)) {
            System.out.printf("demo server: Mamba-1 d_model %d, %d layers, vocabulary %d, %d slots, %s, %s, port %d%n",
                    dModel, layers, DemoLanguageModel.VOCAB, slots, lm.model().device(), lm.model().gemmMode(), server.port());
            System.out.printf("load: %d clients x %d streamed requests, prompts of %d characters, max_tokens %d%n",
                    clients, requests, promptChars, maxTokens);
            print(run(URI.create("http://127.0.0.1:" + server.port()), clients, requests, maxTokens, promptChars, temperature));
        }
        return 0;
    }

    /** Runs the load and returns its summary. */
    static Report run(URI base, int clients, int requests, int maxTokens, int promptChars, double temperature) throws Exception {
        HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(10)).build();
        URI endpoint = base.resolve("/v1/completions");
        ExecutorService pool = Executors.newFixedThreadPool(clients);
        CountDownLatch start = new CountDownLatch(1);
        AtomicInteger seq = new AtomicInteger();
        List<Future<List<Sample>>> work = new ArrayList<>();
        for (int c = 0; c < clients; c++) {
            work.add(pool.submit(() -> {
                start.await();
                List<Sample> mine = new ArrayList<>();
                for (int r = 0; r < requests; r++) mine.add(once(http, endpoint, prompt(seq.incrementAndGet(), promptChars), maxTokens, temperature));
                return mine;
            }));
        }
        long t0 = System.nanoTime();
        start.countDown();
        List<Sample> all = new ArrayList<>();
        try {
            for (Future<List<Sample>> f : work) all.addAll(f.get());
        } finally {
            pool.shutdownNow();
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        List<Double> ttft = new ArrayList<>(), gaps = new ArrayList<>(), latency = new ArrayList<>();
        long tokens = 0;
        int failed = 0;
        for (Sample s : all) {
            if (s.error != null) {
                failed++;
                if (failed == 1) System.err.println("a request failed: " + s.error);
                continue;
            }
            tokens += s.tokens;
            ttft.add(s.firstToken / 1e6);
            latency.add(s.total / 1e6);
            for (long g : s.gaps) gaps.add(g / 1e6);
        }
        return new Report(all.size() - failed, failed, seconds, tokens, percentiles(ttft), percentiles(gaps), percentiles(latency));
    }

    /** One streamed completion: times the first data chunk, the gaps between chunks and the whole request. */
    private static Sample once(HttpClient http, URI endpoint, String prompt, int maxTokens, double temperature) {
        String body = CompletionApi.JSON.createObjectNode().put("prompt", prompt).put("max_tokens", maxTokens)
                .put("temperature", temperature).put("stream", true).toString();
        HttpRequest request = HttpRequest.newBuilder(endpoint).timeout(Duration.ofMinutes(10))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body)).build();
        long t0 = System.nanoTime(), last = 0, first = -1;
        List<Long> gaps = new ArrayList<>();
        int tokens = 0;
        try {
            HttpResponse<Stream<String>> response = http.send(request, HttpResponse.BodyHandlers.ofLines());
            if (response.statusCode() != 200) {
                try (Stream<String> lines = response.body()) {
                    return new Sample(0, gaps, 0, 0, "HTTP " + response.statusCode() + ": " + String.join("\n", lines.toList()));
                }
            }
            try (Stream<String> lines = response.body()) {
                for (Iterator<String> it = lines.iterator(); it.hasNext(); ) {
                    String line = it.next();
                    if (!line.startsWith("data: ")) continue;
                    String data = line.substring(6);
                    if (data.equals("[DONE]")) break;
                    JsonNode chunk = CompletionApi.JSON.readTree(data);
                    if (chunk.has("error")) return new Sample(0, gaps, 0, 0, chunk.toString());
                    if (!chunk.path("choices").path(0).path("finish_reason").isNull()) continue;  // the closing chunk
                    long now = System.nanoTime();
                    if (first < 0) first = now - t0;
                    else gaps.add(now - last);
                    last = now;
                    tokens++;
                }
            }
            return new Sample(first, gaps, System.nanoTime() - t0, tokens, tokens == 0 ? "no tokens" : null);
        } catch (Exception e) {
            return new Sample(0, gaps, 0, 0, e.toString());
        }
    }

    /** A prompt of about {@code chars} characters, different for every request. */
    static String prompt(int n, int chars) {
        StringBuilder b = new StringBuilder("Request ").append(n).append(": ");
        String[] words = {"state", "space", "models", "scan", "the", "sequence", "in", "linear", "time", "and", "memory"};
        for (int i = 0; b.length() < chars; i++) b.append(words[(n * 7 + i * 3) % words.length]).append(' ');
        return b.substring(0, Math.max(1, chars));
    }

    /** p50, p90, p99 (nearest rank) of the values; NaN when there are none. */
    static double[] percentiles(List<Double> values) {
        if (values.isEmpty()) return new double[] {Double.NaN, Double.NaN, Double.NaN};
        List<Double> v = new ArrayList<>(values);
        Collections.sort(v);
        double[] out = new double[3];
        double[] q = {0.50, 0.90, 0.99};
        for (int i = 0; i < 3; i++) out[i] = v.get(Math.min(v.size() - 1, (int) Math.ceil(q[i] * v.size()) - 1));
        return out;
    }

    static void print(Report r) {
        System.out.printf(Locale.ROOT, "%d requests ok, %d failed, in %.2f s%n", r.ok(), r.failed(), r.seconds());
        line("time to first token", r.ttftMs());
        line("inter-token", r.interTokenMs());
        line("request latency", r.latencyMs());
        System.out.printf(Locale.ROOT, "aggregate: %.1f tokens/s (%d tokens)%n", r.tokensPerSecond(), r.tokens());
    }

    private static void line(String what, double[] p) {
        System.out.printf(Locale.ROOT, "%-20s p50 %8.2f ms   p90 %8.2f ms   p99 %8.2f ms%n", what, p[0], p[1], p[2]);
    }
}
