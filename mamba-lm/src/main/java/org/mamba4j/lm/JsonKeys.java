package org.mamba4j.lm;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.Map;
import java.util.List;
import java.util.Locale;
import org.mamba4j.CheckpointException;

/**
 * Typed access to the keys of one JSON object of a model {@code config.json}, with messages naming the file and
 * the key ({@code ssm_cfg.d_state}); plus the reading and parsing every {@code config.json} reader shares. Every
 * failure is a {@link CheckpointException}.
 */
final class JsonKeys {
    /** A config.json larger than this is not a config.json. */
    static final long MAX_FILE_BYTES = 4L << 20;

    static final ObjectMapper MAPPER = new ObjectMapper().enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);

    /** A config.json text: the map's keys in order, indented, with a final newline. */
    static String prettyJson(Map<String, Object> m) {
        try {
            return MAPPER.writer().with(SerializationFeature.INDENT_OUTPUT).writeValueAsString(m) + "\n";
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("cannot encode " + m, e);  // maps of numbers, strings and lists always encode
        }
    }

    final String source;
    final JsonNode root;
    final String prefix;

    JsonKeys(String source, JsonNode root, String prefix) {
        this.source = source;
        this.root = root;
        this.prefix = prefix;
    }

    /** The {@code config.json} a path names: the file itself, or the one inside a folder. */
    static Path configFile(Path configJsonOrDir) {
        return Files.isDirectory(configJsonOrDir) ? configJsonOrDir.resolve("config.json") : configJsonOrDir;
    }

    /** The text of a config file, refusing missing, unreadable and oversized files. */
    static String readText(Path file) {
        if (!Files.isRegularFile(file)) {
            throw new CheckpointException("model config not found: " + file);
        }
        try {
            long size = Files.size(file);
            if (size > MAX_FILE_BYTES) {
                throw new CheckpointException(
                        file + ": " + size + " bytes is too large for a model config.json (at most "
                                + MAX_FILE_BYTES + ")");
            }
            return new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new CheckpointException(file + ": cannot read model config: " + e.getMessage(), e);
        }
    }

    /** Parses the text of a config file into its top-level object. */
    static JsonKeys parseObject(String json, String source) {
        JsonNode root;
        try {
            root = MAPPER.readTree(json);
        } catch (JsonProcessingException e) {
            throw new CheckpointException(
                    source + ": not valid JSON: " + e.getOriginalMessage()
                            + (e.getLocation() == null ? "" : " (line " + e.getLocation().getLineNr()
                                    + ", column " + e.getLocation().getColumnNr() + ")"),
                    e);
        }
        if (root == null || root.isMissingNode()) {
            throw new CheckpointException(source + ": empty file, expected a JSON object");
        }
        if (!root.isObject()) {
            throw new CheckpointException(
                    source + ": expected a JSON object at the top level, got " + kind(root));
        }
        return new JsonKeys(source, root, "");
    }

    /** Whether a parsed top-level object describes a Mamba-3 model: {@code ssm_cfg.layer == "Mamba3"}. */
    static boolean isMamba3(JsonNode root) {
        JsonNode ssm = root == null ? null : root.get("ssm_cfg");
        JsonNode layer = ssm != null && ssm.isObject() ? ssm.get("layer") : null;
        return layer != null && layer.isTextual() && layer.textValue().equals("Mamba3");
    }

    static String kind(JsonNode n) {
        if (n.isTextual()) {
            return "the string " + abbreviate(n.toString());
        }
        if (n.isNumber() || n.isBoolean() || n.isNull()) {
            return n.toString();
        }
        return n.getNodeType().toString().toLowerCase(Locale.ROOT) + " " + abbreviate(n.toString());
    }

    private static String abbreviate(String s) {
        return s.length() <= 40 ? s : s.substring(0, 37) + "...";
    }

    CheckpointException fail(String message) {
        int quote = message.indexOf('\'');
        String msg = prefix.isEmpty() || quote < 0
                ? message
                : message.substring(0, quote + 1) + prefix + message.substring(quote + 1);
        return new CheckpointException(source + ": " + msg);
    }

    JsonKeys child(String key) {
        JsonNode n = root.get(key);
        if (n == null || n.isNull()) {
            return new JsonKeys(source, MAPPER.createObjectNode(), prefix + key + ".");
        }
        if (!n.isObject()) {
            throw fail("'" + key + "' must be an object, got " + kind(n));
        }
        return new JsonKeys(source, n, prefix + key + ".");
    }

    /** The keys of this object, in file order. */
    List<String> keys() {
        List<String> keys = new ArrayList<>();
        for (Iterator<String> it = root.fieldNames(); it.hasNext(); ) keys.add(it.next());
        return keys;
    }

    /** The value of a key, or null when it is absent or JSON {@code null}. */
    JsonNode present(String key) {
        JsonNode n = root.get(key);
        return n == null || n.isNull() ? null : n;
    }

    int reqInt(String key, int min, int max) {
        JsonNode n = present(key);
        if (n == null) {
            throw fail("missing required key '" + key + "'");
        }
        return toInt(key, n, min, max);
    }

    int optInt(String key, int dflt, int min, int max) {
        JsonNode n = present(key);
        return n == null ? dflt : toInt(key, n, min, max);
    }

    private int toInt(String key, JsonNode n, int min, int max) {
        long v;
        if (n.isIntegralNumber() && n.canConvertToLong()) {
            v = n.longValue();
        } else if (n.isFloatingPointNumber() && n.doubleValue() == Math.rint(n.doubleValue())
                && Math.abs(n.doubleValue()) < 1e15) {
            v = (long) n.doubleValue();
        } else if (n.isIntegralNumber()) {
            v = n.bigIntegerValue().signum() > 0 ? Long.MAX_VALUE : Long.MIN_VALUE;
        } else {
            throw fail("'" + key + "' must be an integer, got " + kind(n));
        }
        if (v < min || v > max) {
            String what = min == 1 && v < 1 ? "must be positive" : "must be in [" + min + ", " + max + "]";
            throw fail("'" + key + "' " + what + ", got " + n);
        }
        return (int) v;
    }

    boolean optBool(String key, boolean dflt) {
        JsonNode n = present(key);
        if (n == null) {
            return dflt;
        }
        if (!n.isBoolean()) {
            throw fail("'" + key + "' must be true or false, got " + kind(n));
        }
        return n.booleanValue();
    }

    String optString(String key, String dflt) {
        JsonNode n = present(key);
        if (n == null) {
            return dflt;
        }
        if (!n.isTextual()) {
            throw fail("'" + key + "' must be a string, got " + kind(n));
        }
        return n.textValue();
    }

    double optEps(String key) {
        return optNumberOpen(key, 1e-5, 0.0, 1.0);
    }

    /** An optional number of any value. */
    double optNumber(String key, double dflt) {
        JsonNode n = present(key);
        if (n == null) {
            return dflt;
        }
        if (!n.isNumber()) {
            throw fail("'" + key + "' must be a number, got " + kind(n));
        }
        return n.doubleValue();
    }

    /** An optional number strictly inside (lo, hi). */
    double optNumberOpen(String key, double dflt, double lo, double hi) {
        JsonNode n = present(key);
        if (n == null) {
            return dflt;
        }
        if (!n.isNumber()) {
            throw fail("'" + key + "' must be a number, got " + kind(n));
        }
        double v = n.doubleValue();
        if (!(v > lo && v < hi)) {
            throw fail("'" + key + "' must be in (" + fmt(lo) + ", " + fmt(hi) + "), got " + n);
        }
        return v;
    }

    private static String fmt(double v) {
        return v == Math.rint(v) && Math.abs(v) < 1e15 ? Long.toString((long) v) : Double.toString(v);
    }

    int dtRank(String key, int dModel, int dInner) {
        JsonNode n = present(key);
        if (n == null || (n.isTextual() && n.textValue().equals("auto"))) {
            return (dModel + 15) / 16;
        }
        if (n.isTextual()) {
            throw fail("'" + key + "' must be an integer or \"auto\", got " + kind(n));
        }
        return toInt(key, n, 1, dInner);
    }
}
