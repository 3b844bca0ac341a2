package org.mamba4j.samples;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.lm.Completion;
import org.mamba4j.lm.GeneratedToken;
import org.mamba4j.lm.GenerationHandle;
import org.mamba4j.lm.Generator;
import org.mamba4j.lm.GeneratorClosedException;
import org.mamba4j.lm.MambaLM;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * An OpenAI-style completion server over a {@link Generator}, on the JDK's built-in HTTP server:
 *
 * <ul>
 *   <li>{@code POST /v1/completions} — JSON in, JSON out ({@link CompletionApi} lists the fields); with {@code
 *       "stream": true} server-sent events, one {@code data: {...}} chunk per generated token, a last chunk with
 *       the {@code finish_reason}, then {@code data: [DONE]}.
 *   <li>{@code GET /health} — 200 {@code {"status": "ok", ...}} while the generator runs, 503 once it is closed.
 * </ul>
 *
 * Errors are OpenAI's JSON error objects: 400 (bad JSON or field), 404 (unknown path), 405 (wrong method, with
 * {@code Allow}), 413 (body over the limit), 429 (too many requests waiting for a slot), 503 (generator closed),
 * 500 (the model failed). A streamed request whose client disconnects is cancelled at its next token.
 *
 * <pre>
 * java -cp samples/target/mamba4j-samples.jar org.mamba4j.samples.CompletionServer --model mamba-130m-hf --port 8080
 * curl -s localhost:8080/v1/completions -d '{"prompt": "Hello", "max_tokens": 20, "temperature": 0.7}'
 * </pre>
 */
public final class CompletionServer implements AutoCloseable {
    /** Request bodies above this are refused with 413 (prompts of a few hundred thousand characters fit). */
    public static final int DEFAULT_MAX_BODY_BYTES = 1 << 20;

    static {
        // Streams write one small event per token: without TCP_NODELAY, Nagle's algorithm holds each one back until
        // the client's delayed ACK (~40 ms) arrives. The JDK server reads this property once, when first used.
        if (System.getProperty("sun.net.httpserver.nodelay") == null) System.setProperty("sun.net.httpserver.nodelay", "true");
    }

    private final Generator generator;
    private final String modelName;
    private final int maxBodyBytes;
    private final HttpServer http;
    private final ExecutorService handlers;
    private final AtomicLong ids = new AtomicLong();

    /** Binds {@code address} (port 0: an ephemeral port) and starts serving {@code generator}. */
    public CompletionServer(Generator generator, String modelName, InetSocketAddress address, int maxBodyBytes) throws IOException {
        this.generator = generator;
        this.modelName = modelName;
        this.maxBodyBytes = maxBodyBytes;
        this.http = HttpServer.create(address, 128);
        // a streamed completion holds its handler thread while it generates; the generator's queue limit bounds them
        this.handlers = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "completion-http");
            t.setDaemon(true);
            return t;
        });
        http.setExecutor(handlers);
        http.createContext("/", this::handle);
        http.start();
    }

    /** The bound port. */
    public int port() {
        return http.getAddress().getPort();
    }

    /** Stops listening and ends open exchanges (streams in progress are cancelled); the generator stays open. */
    @Override
    public void close() {
        http.stop(0);
        handlers.shutdownNow();
    }

    // ---------------------------------------------------------------- routing

    private void handle(HttpExchange ex) {
        try (ex) {
            try {
                String path = ex.getRequestURI().getPath();
                switch (path) {
                    case "/v1/completions" -> {
                        allow(ex, "POST");
                        completions(ex);
                    }
                    case "/health" -> {
                        allow(ex, "GET");
                        health(ex);
                    }
                    default -> throw new ApiError(404, "not_found_error", null, "no such endpoint: " + path);
                }
            } catch (RuntimeException e) {
                ApiError error = asApiError(e);
                if (ex.getResponseCode() == -1) sendJson(ex, error.status, CompletionApi.error(error.type, error.param, error.getMessage()));
            }
        } catch (IOException e) {
            // the client went away; nothing to answer
        }
    }

    private static void allow(HttpExchange ex, String method) {
        if (!ex.getRequestMethod().equalsIgnoreCase(method)) {
            ex.getResponseHeaders().set("Allow", method);
            throw new ApiError(405, "invalid_request_error", null,
                    ex.getRequestMethod() + " is not allowed here; use " + method);
        }
    }

    /** Maps the generator's refusals to HTTP statuses. */
    private static ApiError asApiError(Throwable e) {
        if (e instanceof CompletionException || e instanceof ExecutionException) e = e.getCause() != null ? e.getCause() : e;
        if (e instanceof ApiError a) return a;
        if (e instanceof GeneratorClosedException) return new ApiError(503, "server_unavailable", null, e.getMessage());
        if (e instanceof RejectedExecutionException)
            return new ApiError(429, "rate_limit_error", null, "too many requests are waiting: " + e.getMessage());
        if (e instanceof IllegalArgumentException) {  // the generator's refusals name what is wrong
            String m = String.valueOf(e.getMessage());
            return ApiError.badRequest(m.contains("maxNewTokens") ? "max_tokens" : m.contains("stop") ? "stop" : "prompt", m);
        }
        if (e instanceof CancellationException) return new ApiError(503, "server_unavailable", null, "the request was cancelled");
        return new ApiError(500, "server_error", null, "generation failed: " + e);
    }

    // ---------------------------------------------------------------- endpoints

    private void health(HttpExchange ex) throws IOException {
        boolean up = !generator.isClosed();
        ObjectNode body = CompletionApi.JSON.createObjectNode().put("status", up ? "ok" : "unavailable")
                .put("model", modelName).put("slots", generator.slots()).put("active", generator.activeRequests())
                .put("waiting", generator.waitingRequests());
        sendJson(ex, up ? 200 : 503, body);
    }

    private void completions(HttpExchange ex) throws IOException {
        CompletionApi.Parsed parsed = CompletionApi.parse(readBody(ex));
        String id = "cmpl-" + Long.toString(System.nanoTime(), 36) + "-" + ids.incrementAndGet();
        long created = System.currentTimeMillis() / 1000;
        GenerationHandle handle = generator.submit(parsed.request());
        if (!parsed.stream()) {
            Completion c;
            try {
                c = handle.result().join();
            } catch (CompletionException | CancellationException e) {
                throw e instanceof CompletionException ce ? asApiError(ce.getCause()) : asApiError(e);
            }
            sendJson(ex, 200, CompletionApi.completion(id, created, modelName, c));
            return;
        }
        ex.getResponseHeaders().set("Content-Type", "text/event-stream; charset=utf-8");
        ex.getResponseHeaders().set("Cache-Control", "no-cache");
        ex.sendResponseHeaders(200, 0);  // chunked: each flush goes out at once
        OutputStream out = ex.getResponseBody();
        try {
            for (GeneratedToken t : handle) event(out, CompletionApi.chunk(id, created, modelName, t.text(), null));
            Completion c = handle.result().join();
            event(out, CompletionApi.chunk(id, created, modelName, "", CompletionApi.finishReason(c.finishReason())));
            out.write("data: [DONE]\n\n".getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            handle.cancel();  // the client disconnected: free the slot
            throw e;
        } catch (RuntimeException e) {  // generation failed after the headers went out: say so in the stream
            handle.cancel();
            ApiError error = asApiError(e);
            event(out, CompletionApi.error(error.type, error.param, error.getMessage()));
        }
    }

    private byte[] readBody(HttpExchange ex) throws IOException {
        String length = ex.getRequestHeaders().getFirst("Content-Length");
        if (length != null) {
            try {
                if (Long.parseLong(length.trim()) > maxBodyBytes) throw tooLarge();
            } catch (NumberFormatException e) {
                throw ApiError.badRequest(null, "bad Content-Length: " + length);
            }
        }
        try (InputStream in = ex.getRequestBody()) {
            byte[] body = in.readNBytes(maxBodyBytes + 1);
            if (body.length > maxBodyBytes) throw tooLarge();
            return body;
        }
    }

    private ApiError tooLarge() {
        return new ApiError(413, "invalid_request_error", null, "the request body is larger than " + maxBodyBytes + " bytes");
    }

    private static void event(OutputStream out, JsonNode data) throws IOException {
        out.write(("data: " + data + "\n\n").getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    private static void sendJson(HttpExchange ex, int status, JsonNode body) throws IOException {
        byte[] bytes = CompletionApi.JSON.writeValueAsBytes(body);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(bytes);
        }
    }

    // ---------------------------------------------------------------- command line

    /** The command line: load a model (or the random demo model), build a generator, serve until killed. */
    @Command(name = "completion-server", mixinStandardHelpOptions = true, versionProvider = SampleVersion.class,
            description = "Serve a Mamba language model at POST /v1/completions (OpenAI-style, with SSE streaming).")
    static final class Cli implements Callable<Integer> {
        @Option(names = "--model", description = "A model folder (config.json, weights, tokenizer.json).")
        Path model;
        @Option(names = "--demo", description = "Serve a random-weight byte-level demo model instead (no download needed).")
        boolean demo;
        @Option(names = "--demo-d-model", description = "Width of the demo model, default ${DEFAULT-VALUE}.")
        int demoDModel = 256;
        @Option(names = "--demo-layers", description = "Layers of the demo model, default ${DEFAULT-VALUE}.")
        int demoLayers = 4;
        @Option(names = "--device", description = "cpu, cuda, cuda:N or best (default ${DEFAULT-VALUE}).")
        String device = "best";
        @Option(names = "--dtype", description = "f32, tf32, bf16 or f16 (default ${DEFAULT-VALUE}; the CPU stores f32).")
        String dtype = "f32";
        @Option(names = "--deterministic", description = "DETERMINISTIC products: every request equals its solo run bit for bit.")
        boolean deterministic;
        @Option(names = "--host", description = "Address to bind, default ${DEFAULT-VALUE}.")
        String host = "127.0.0.1";
        @Option(names = "--port", description = "Port (0: any free one), default ${DEFAULT-VALUE}.")
        int port = 8080;
        @Option(names = "--slots", description = "Requests decoded at once, default ${DEFAULT-VALUE}.")
        int slots = 8;
        @CommandLine.Spec CommandLine.Model.CommandSpec spec;

        @Override
        public Integer call() throws Exception {
            if ((model == null) == !demo) throw new CommandLine.ParameterException(spec.commandLine(), "give --model DIR or --demo");
            MambaLM lm = loadModel(model, demo, demoDModel, demoLayers, device, dtype, deterministic);
            Generator gen = Generator.builder(lm).slots(slots).build();
            CompletionServer server = new CompletionServer(gen, demo ? "mamba4j-demo" : model.getFileName().toString(),
                    new InetSocketAddress(host, port), DEFAULT_MAX_BODY_BYTES);
            System.out.printf("serving %s on http://%s:%d/v1/completions (%d slots, %s)%n",
                    demo ? "the demo model" : model, host, server.port(), slots, lm.model().device());
            CountDownLatch stopped = new CountDownLatch(1);
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                server.close();
                gen.close();
                lm.close();
                stopped.countDown();
            }));
            stopped.await();
            return 0;
        }
    }

    static MambaLM loadModel(Path folder, boolean demo, int dModel, int layers, String device, String dtype, boolean deterministic) {
        Device d = parseDevice(device);
        if (demo) return DemoLanguageModel.create(dModel, layers, d, deterministic ? GemmMode.DETERMINISTIC : GemmMode.CUBLAS_FAST, 1);
        MambaLM lm = MambaLM.fromPretrained(folder, d, DType.valueOf(dtype.toUpperCase(Locale.ROOT)));
        if (lm.tokenizer() == null) {
            lm.close();
            throw new IllegalArgumentException(folder + " has no tokenizer.json: the server needs one");
        }
        if (deterministic) lm.model().setGemmMode(GemmMode.DETERMINISTIC);
        return lm;
    }

    static Device parseDevice(String s) {
        if (s.equals("best")) return Device.best();
        if (s.equals("cpu")) return Device.cpu();
        if (s.equals("cuda")) return Device.cuda(0);
        if (s.startsWith("cuda:")) return Device.cuda(Integer.parseInt(s.substring(5)));
        throw new IllegalArgumentException("unknown device " + s + " (cpu, cuda, cuda:N, best)");
    }

    public static void main(String[] args) {
        if (System.getProperty("org.bytedeco.javacpp.logger") == null) System.setProperty("org.bytedeco.javacpp.logger", "slf4j");
        int code = new CommandLine(new Cli()).execute(args);
        if (code != 0) System.exit(code);
    }
}
