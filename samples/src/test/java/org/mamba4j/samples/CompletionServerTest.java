package org.mamba4j.samples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.lm.Completion;
import org.mamba4j.lm.Generator;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Sampling;

/**
 * The completion server on the loopback interface (ephemeral port) with a tiny random byte-level model: JSON
 * completions equal to the generator's, SSE streaming, stop strings, every 4xx/503 case, health, and a short load
 * test run.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class CompletionServerTest {
    static MambaLM lm;
    static Generator gen;
    static CompletionServer server;
    static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

    @BeforeAll
    static void start() throws Exception {
        if (System.getProperty("ENGINE_CACHE_DIR") == null && System.getenv("ENGINE_CACHE_DIR") == null)
            System.setProperty("ENGINE_CACHE_DIR", Path.of("target", "djl-cache").toAbsolutePath().toString());
        lm = DemoLanguageModel.create(32, 2, Device.cpu(), GemmMode.DETERMINISTIC, 1);
        gen = Generator.builder(lm).slots(4).maxNewTokens(256).build();
        server = new CompletionServer(gen, "tiny", new InetSocketAddress("127.0.0.1", 0), 4096);
    }

    @AfterAll
    static void stop() {
        server.close();
        gen.close();
        lm.close();
    }

    static URI uri(CompletionServer s, String path) {
        return URI.create("http://127.0.0.1:" + s.port() + path);
    }

    static HttpResponse<String> post(CompletionServer s, String path, String body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(uri(s, path)).timeout(Duration.ofSeconds(60))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    static HttpResponse<String> get(CompletionServer s, String path) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(uri(s, path)).timeout(Duration.ofSeconds(60)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    }

    static JsonNode json(HttpResponse<String> r) throws Exception {
        return CompletionApi.JSON.readTree(r.body());
    }

    @Test
    void completionIsTheGeneratorsResultAsOpenAiJson() throws Exception {
        HttpResponse<String> r = post(server, "/v1/completions",
                "{\"model\": \"x\", \"prompt\": \"Hello\", \"max_tokens\": 12, \"temperature\": 0.8, \"top_p\": 0.95, \"top_k\": 50, \"seed\": 7}");
        assertEquals(200, r.statusCode(), r.body());
        assertEquals("application/json", r.headers().firstValue("Content-Type").orElse(""));
        JsonNode body = json(r);
        Completion want = gen.generate("Hello", Sampling.ofTemperature(0.8).topP(0.95).topK(50).seed(7).maxNewTokens(12))
                .get(60, TimeUnit.SECONDS);
        assertEquals("text_completion", body.get("object").asText());
        assertEquals("tiny", body.get("model").asText());
        assertTrue(body.get("id").asText().startsWith("cmpl-"));
        JsonNode choice = body.get("choices").get(0);
        assertEquals(want.text(), choice.get("text").asText());
        assertEquals(want.finishReason() == org.mamba4j.lm.FinishReason.STOP ? "stop" : "length", choice.get("finish_reason").asText());
        assertEquals(5, body.get("usage").get("prompt_tokens").asInt(), "one token per byte of \"Hello\"");
        assertEquals(want.tokenCount(), body.get("usage").get("completion_tokens").asInt());
        assertEquals(5 + want.tokenCount(), body.get("usage").get("total_tokens").asInt());
    }

    @Test
    void tokenIdPromptsWork() throws Exception {
        HttpResponse<String> r = post(server, "/v1/completions", "{\"prompt\": [72, 101, 108], \"max_tokens\": 3, \"temperature\": 0}");
        assertEquals(200, r.statusCode(), r.body());
        assertEquals(3, json(r).get("usage").get("prompt_tokens").asInt());
    }

    /** The data events of an SSE body, in order. */
    static List<String> events(String body) {
        List<String> out = new ArrayList<>();
        for (String block : body.split("\n\n")) {
            if (block.isEmpty()) continue;
            assertTrue(block.startsWith("data: "), "an SSE event: " + block);
            out.add(block.substring(6));
        }
        return out;
    }

    @Test
    void streamingSendsOneEventPerTokenThenTheFinishAndDone() throws Exception {
        String req = "{\"prompt\": \"Once upon\", \"max_tokens\": 20, \"temperature\": 1.0, \"seed\": 3";
        HttpResponse<String> r = post(server, "/v1/completions", req + ", \"stream\": true}");
        assertEquals(200, r.statusCode(), r.body());
        assertTrue(r.headers().firstValue("Content-Type").orElse("").startsWith("text/event-stream"));
        assertTrue(r.body().endsWith("data: [DONE]\n\n"));
        List<String> events = events(r.body());
        assertEquals("[DONE]", events.get(events.size() - 1));
        JsonNode last = CompletionApi.JSON.readTree(events.get(events.size() - 2));
        StringBuilder text = new StringBuilder();
        for (String e : events.subList(0, events.size() - 2)) {
            JsonNode chunk = CompletionApi.JSON.readTree(e);
            assertEquals("text_completion", chunk.get("object").asText());
            assertTrue(chunk.get("choices").get(0).get("finish_reason").isNull());
            text.append(chunk.get("choices").get(0).get("text").asText());
        }
        JsonNode whole = json(post(server, "/v1/completions", req + "}"));
        assertEquals(whole.get("choices").get(0).get("text").asText(), text.toString(), "streamed = non-streamed text");
        assertEquals(whole.get("usage").get("completion_tokens").asInt(), events.size() - 2, "one event per token");
        assertEquals(whole.get("choices").get(0).get("finish_reason").asText(), last.get("choices").get(0).get("finish_reason").asText());
    }

    @Test
    void stopStringsCutTheText() throws Exception {
        // a seed whose text has two clean characters (random bytes are mostly not UTF-8) after its start
        String full = null, stop = null;
        int seed = 0;
        for (; seed < 60 && stop == null; seed++) {
            full = json(post(server, "/v1/completions", "{\"prompt\": \"abc\", \"max_tokens\": 40, \"seed\": " + seed + "}"))
                    .get("choices").get(0).get("text").asText();
            for (int i = 2; i + 2 <= full.length() && stop == null; i++) {
                String s = full.substring(i, i + 2);
                if (s.indexOf('\uFFFD') < 0 && !Character.isSurrogate(s.charAt(0)) && !Character.isSurrogate(s.charAt(1))) stop = s;
            }
        }
        assertTrue(stop != null, "some seed generates two clean characters");
        var req = CompletionApi.JSON.createObjectNode().put("prompt", "abc").put("max_tokens", 40).put("seed", seed - 1);
        req.putArray("stop").add("\u2603never").add(stop);
        JsonNode body = json(post(server, "/v1/completions", req.toString()));
        assertEquals(full.substring(0, full.indexOf(stop)), body.get("choices").get(0).get("text").asText());
        assertEquals("stop", body.get("choices").get(0).get("finish_reason").asText());
    }

    static void assertError(HttpResponse<String> r, int status, String param) throws Exception {
        assertEquals(status, r.statusCode(), r.body());
        assertEquals("application/json", r.headers().firstValue("Content-Type").orElse(""));
        JsonNode e = json(r).get("error");
        assertFalse(e.get("message").asText().isEmpty());
        assertTrue(e.has("type"));
        if (param != null) assertEquals(param, e.get("param").asText(), r.body());
    }

    @Test
    void badRequestsGetClear400s() throws Exception {
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\""), 400, null);
        assertError(post(server, "/v1/completions", "[1, 2]"), 400, null);
        assertError(post(server, "/v1/completions", ""), 400, null);
        assertError(post(server, "/v1/completions", "{}"), 400, "prompt");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"\"}"), 400, "prompt");
        assertError(post(server, "/v1/completions", "{\"prompt\": [1, 999]}"), 400, "prompt");
        assertError(post(server, "/v1/completions", "{\"prompt\": {\"a\": 1}}"), 400, "prompt");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"temperature\": \"hot\"}"), 400, "temperature");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"temperature\": -1}"), 400, "temperature");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"top_p\": 2}"), 400, "top_p");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"top_k\": 1.5}"), 400, "top_k");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 0}"), 400, "max_tokens");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 100000}"), 400, "max_tokens");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"seed\": \"s\"}"), 400, "seed");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"stop\": 5}"), 400, "stop");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}"), 400, "stop");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"stream\": \"yes\"}"), 400, "stream");
        assertError(post(server, "/v1/completions", "{\"prompt\": \"x\", \"n\": 2}"), 400, "n");
    }

    @Test
    void wrongPathsMethodsAndSizes() throws Exception {
        assertError(get(server, "/v1/nothing"), 404, null);
        assertError(post(server, "/v1/completions/extra", "{}"), 404, null);
        HttpResponse<String> r = get(server, "/v1/completions");
        assertError(r, 405, null);
        assertEquals("POST", r.headers().firstValue("Allow").orElse(""));
        assertError(post(server, "/health", "{}"), 405, null);
        assertError(post(server, "/v1/completions", "{\"prompt\": \"" + "a".repeat(5000) + "\"}"), 413, null);
    }

    @Test
    void healthSaysOk() throws Exception {
        HttpResponse<String> r = get(server, "/health");
        assertEquals(200, r.statusCode());
        assertEquals("ok", json(r).get("status").asText());
        assertEquals(4, json(r).get("slots").asInt());
    }

    @Test
    void aClosedGeneratorAnswers503() throws Exception {
        Generator closing = Generator.builder(lm).slots(1).build();
        try (CompletionServer s = new CompletionServer(closing, "tiny", new InetSocketAddress("127.0.0.1", 0), 4096)) {
            assertEquals(200, post(s, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}").statusCode());
            closing.close();
            assertError(post(s, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}"), 503, null);
            assertEquals(503, get(s, "/health").statusCode());
            assertEquals("unavailable", json(get(s, "/health")).get("status").asText());
        }
    }

    @Test
    void aClientThatDisconnectsMidStreamIsCancelled() throws Exception {
        // a token-id prompt: no end-of-text stop, so only the disconnect can end it early
        try (Generator g = Generator.builder(lm).slots(1).maxNewTokens(1_000_000).build();
             CompletionServer s = new CompletionServer(g, "tiny", new InetSocketAddress("127.0.0.1", 0), 4096)) {
            HttpResponse<java.io.InputStream> r = HTTP.send(HttpRequest.newBuilder(uri(s, "/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\": [120], \"max_tokens\": 1000000, \"stream\": true}")).build(),
                    HttpResponse.BodyHandlers.ofInputStream());
            assertEquals(200, r.statusCode());
            try (java.io.InputStream in = r.body()) {
                assertTrue(in.read(new byte[64]) > 0, "the first event arrived");
                assertEquals(1, g.activeRequests());
            }  // closing the body ends the connection
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);  // a million tokens would take far longer
            while (g.activeRequests() > 0 && System.nanoTime() < deadline) Thread.sleep(10);
            assertEquals(0, g.activeRequests(), "the request was cancelled and its slot freed");
            assertEquals(200, post(s, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}").statusCode());
        }
    }

    @Test
    void theLoadTestRunsAgainstTheServer() throws Exception {
        LoadTest.Report r = LoadTest.run(uri(server, "/"), 3, 2, 5, 40, 0.8);
        assertEquals(6, r.ok());
        assertEquals(0, r.failed());
        assertTrue(r.tokens() >= 6 && r.tokens() <= 30, "tokens " + r.tokens());
        assertTrue(r.ttftMs()[0] > 0 && r.ttftMs()[0] <= r.ttftMs()[2]);
        assertTrue(r.tokensPerSecond() > 0);
    }
}
