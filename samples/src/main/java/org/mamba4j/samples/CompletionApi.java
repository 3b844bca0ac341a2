package org.mamba4j.samples;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import org.mamba4j.InvalidConfigException;
import org.mamba4j.lm.Completion;
import org.mamba4j.lm.FinishReason;
import org.mamba4j.lm.GenerationRequest;
import org.mamba4j.lm.Sampling;

/**
 * The JSON of OpenAI's {@code POST /v1/completions}: a request body turned into a {@link GenerationRequest}
 * (every field checked, with the field named in the error), and the response bodies and stream chunks.
 *
 * <p>Fields read: {@code prompt} (a string, which also stops at the tokenizer's end-of-text token; or an array of
 * token ids, which stops only at {@code max_tokens} or a stop string, as {@code MambaLM.generate(int[], ...)} does), {@code max_tokens} (default 16), {@code
 * temperature} (default 1), {@code top_p} (default 1), {@code top_k} (0 or -1 = off), {@code seed} (default: a random
 * one per request), {@code stop} (a string or up to 4 strings), {@code stream} (default false), {@code n} (only 1).
 * Other fields ({@code model}, {@code user}, ...) are ignored, as an OpenAI-compatible server does.
 */
final class CompletionApi {
    static final ObjectMapper JSON = new ObjectMapper();
    static final int DEFAULT_MAX_TOKENS = 16, MAX_STOP_STRINGS = 4;

    /** A parsed request: what to generate and whether to stream it. */
    record Parsed(GenerationRequest request, boolean stream) {}

    private CompletionApi() {}

    /** Parses and checks a request body; throws {@link ApiError} (400) naming the field at fault. */
    static Parsed parse(byte[] body) {
        JsonNode root;
        try {
            root = JSON.readTree(body);
        } catch (JsonProcessingException e) {
            throw ApiError.badRequest(null, "the body is not valid JSON: " + e.getOriginalMessage());
        } catch (java.io.IOException e) {
            throw ApiError.badRequest(null, "the body could not be read: " + e.getMessage());
        }
        if (root == null || !root.isObject()) throw ApiError.badRequest(null, "the body must be a JSON object");

        int n = intField(root, "n", 1);
        if (n != 1) throw ApiError.badRequest("n", "only n = 1 is supported");
        Sampling s;
        try {
            s = Sampling.ofTemperature(numberField(root, "temperature", 1.0))
                    .topP(numberField(root, "top_p", 1.0))
                    .maxNewTokens(intField(root, "max_tokens", DEFAULT_MAX_TOKENS));
            int topK = intField(root, "top_k", 0);
            s = s.topK(topK == -1 ? 0 : topK);
        } catch (InvalidConfigException e) {
            throw ApiError.badRequest(fieldOf(e.getMessage()), e.getMessage());
        }
        JsonNode seed = root.get("seed");
        if (seed == null || seed.isNull()) s = s.seed(ThreadLocalRandom.current().nextLong());
        else if (seed.isIntegralNumber() && seed.canConvertToLong()) s = s.seed(seed.longValue());
        else throw ApiError.badRequest("seed", "seed must be an integer");

        GenerationRequest request = prompt(root.get("prompt"), s);
        List<String> stops = stopStrings(root.get("stop"));
        if (!stops.isEmpty()) request = request.stopStrings(stops.toArray(new String[0]));
        JsonNode stream = root.get("stream");
        if (stream != null && !stream.isNull() && !stream.isBoolean()) throw ApiError.badRequest("stream", "stream must be true or false");
        return new Parsed(request, stream != null && stream.asBoolean(false));
    }

    private static GenerationRequest prompt(JsonNode p, Sampling s) {
        if (p == null || p.isNull()) throw ApiError.badRequest("prompt", "prompt is required");
        if (p.isTextual()) return GenerationRequest.ofText(p.textValue(), s);
        if (p.isArray() && p.size() > 0 && p.get(0).isIntegralNumber()) {
            int[] ids = new int[p.size()];
            for (int i = 0; i < ids.length; i++) {
                JsonNode id = p.get(i);
                if (!id.isIntegralNumber() || !id.canConvertToInt())
                    throw ApiError.badRequest("prompt", "prompt[" + i + "] must be a token id");
                ids[i] = id.intValue();
            }
            return GenerationRequest.ofTokens(ids, s);
        }
        if (p.isArray() && p.size() == 1 && p.get(0).isTextual()) return GenerationRequest.ofText(p.get(0).textValue(), s);
        throw ApiError.badRequest("prompt", "prompt must be a string, one string in an array, or an array of token ids");
    }

    private static List<String> stopStrings(JsonNode stop) {
        List<String> out = new ArrayList<>();
        if (stop == null || stop.isNull()) return out;
        if (stop.isTextual()) out.add(stop.textValue());
        else if (stop.isArray()) for (JsonNode s : stop) {
            if (!s.isTextual()) throw ApiError.badRequest("stop", "stop must be a string or an array of strings");
            out.add(s.textValue());
        }
        else throw ApiError.badRequest("stop", "stop must be a string or an array of strings");
        if (out.size() > MAX_STOP_STRINGS) throw ApiError.badRequest("stop", "at most " + MAX_STOP_STRINGS + " stop strings");
        for (String s : out) if (s.isEmpty()) throw ApiError.badRequest("stop", "stop strings must not be empty");
        return out;
    }

    private static int intField(JsonNode root, String name, int dflt) {
        JsonNode v = root.get(name);
        if (v == null || v.isNull()) return dflt;
        if (!v.isIntegralNumber() || !v.canConvertToInt()) throw ApiError.badRequest(name, name + " must be an integer");
        return v.intValue();
    }

    private static double numberField(JsonNode root, String name, double dflt) {
        JsonNode v = root.get(name);
        if (v == null || v.isNull()) return dflt;
        if (!v.isNumber()) throw ApiError.badRequest(name, name + " must be a number");
        return v.doubleValue();
    }

    /** Sampling's messages start with its field name: map it to the request's. */
    private static String fieldOf(String message) {
        if (message == null) return null;
        if (message.startsWith("temperature")) return "temperature";
        if (message.startsWith("topP")) return "top_p";
        if (message.startsWith("topK")) return "top_k";
        if (message.startsWith("maxNewTokens")) return "max_tokens";
        return null;
    }

    // ---------------------------------------------------------------- responses

    /** The whole response of a non-streamed completion. */
    static ObjectNode completion(String id, long created, String model, Completion c) {
        ObjectNode root = head(id, created, model);
        choice(root.putArray("choices"), c.text(), finishReason(c.finishReason()));
        ObjectNode usage = root.putObject("usage");
        usage.put("prompt_tokens", c.promptTokens());
        usage.put("completion_tokens", c.tokenCount());
        usage.put("total_tokens", c.promptTokens() + c.tokenCount());
        return root;
    }

    /** One stream chunk: a piece of text, and the finish reason in the last one (else null). */
    static ObjectNode chunk(String id, long created, String model, String text, String finishReason) {
        ObjectNode root = head(id, created, model);
        choice(root.putArray("choices"), text, finishReason);
        return root;
    }

    static String finishReason(FinishReason r) {
        return r == FinishReason.STOP ? "stop" : "length";
    }

    /** {@code {"error": {"message", "type", "param", "code"}}}. */
    static ObjectNode error(String type, String param, String message) {
        ObjectNode root = JSON.createObjectNode();
        ObjectNode e = root.putObject("error");
        e.put("message", message);
        e.put("type", type);
        if (param == null) e.putNull("param");
        else e.put("param", param);
        e.putNull("code");
        return root;
    }

    private static ObjectNode head(String id, long created, String model) {
        return JSON.createObjectNode().put("id", id).put("object", "text_completion").put("created", created).put("model", model);
    }

    private static void choice(ArrayNode choices, String text, String finishReason) {
        ObjectNode c = choices.addObject().put("text", text).put("index", 0);
        c.putNull("logprobs");
        if (finishReason == null) c.putNull("finish_reason");
        else c.put("finish_reason", finishReason);
    }
}
