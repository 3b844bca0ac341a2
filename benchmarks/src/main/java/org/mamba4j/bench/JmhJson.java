package org.mamba4j.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Reads and writes benchmark results in JMH's JSON result format (an array of objects with {@code benchmark},
 * {@code mode}, {@code params}, {@code primaryMetric.score/scoreError/scoreUnit} and {@code secondaryMetrics}),
 * so JMH runs, the GPU benchmark programs and the stored baselines are all one format.
 */
public final class JmhJson {
    private static final ObjectMapper MAPPER = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    private JmhJson() {}

    public static List<BenchResult> read(Path file) throws IOException {
        JsonNode root = MAPPER.readTree(file.toFile());
        if (root == null || !root.isArray()) throw new IOException(file + " is not a JMH JSON result file (an array)");
        List<BenchResult> out = new ArrayList<>();
        for (JsonNode r : root) {
            Map<String, String> params = new LinkedHashMap<>();
            JsonNode p = r.path("params");
            for (Iterator<Map.Entry<String, JsonNode>> it = p.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> e = it.next();
                params.put(e.getKey(), e.getValue().asText());
            }
            Map<String, Double> secondary = new LinkedHashMap<>();
            for (Iterator<Map.Entry<String, JsonNode>> it = r.path("secondaryMetrics").fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> e = it.next();
                secondary.put(e.getKey(), number(e.getValue().path("score")));
            }
            JsonNode m = r.path("primaryMetric");
            out.add(new BenchResult(r.path("benchmark").asText(), r.path("mode").asText(), params, number(m.path("score")),
                    number(m.path("scoreError")), m.path("scoreUnit").asText(), secondary));
        }
        return out;
    }

    /** JMH writes "NaN" (a string) for the error of a single measurement. */
    private static double number(JsonNode n) {
        if (n.isNumber()) return n.asDouble();
        return n.isTextual() ? Double.parseDouble(n.asText()) : Double.NaN;
    }

    public static void write(Path file, List<BenchResult> results) throws IOException {
        ArrayNode root = MAPPER.createArrayNode();
        for (BenchResult r : results) {
            ObjectNode o = root.addObject();
            o.put("jmhVersion", "n/a (written by " + JmhJson.class.getSimpleName() + ")");
            o.put("benchmark", r.benchmark());
            o.put("mode", r.mode());
            ObjectNode params = o.putObject("params");
            r.params().forEach(params::put);
            ObjectNode m = o.putObject("primaryMetric");
            m.put("score", r.score());
            m.put("scoreError", r.error());
            m.put("scoreUnit", r.unit());
            ObjectNode sec = o.putObject("secondaryMetrics");
            r.secondary().forEach((k, v) -> sec.putObject(k).put("score", v).put("scoreUnit", r.unit()));
        }
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) Files.createDirectories(parent);
        MAPPER.writeValue(file.toFile(), root);
    }
}
