package org.mamba4j.samples;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.lm.MambaLM;
import org.mamba4j.lm.Tokenizer;

/**
 * A random-weight Mamba-1 language model with a byte-level tokenizer (one token per UTF-8 byte, plus
 * {@code <|endoftext|>}): it talks nonsense, but it has the shapes and costs of a real model, so the completion
 * server and its load test run without downloading weights.
 */
public final class DemoLanguageModel {
    /** 256 byte tokens and the end-of-text token, padded to a multiple of 8. */
    public static final int VOCAB = 257, PADDED = 264, EOS = 256;

    private DemoLanguageModel() {}

    /** A model of this width and depth on {@code device}, seeded weights. */
    public static MambaLM create(int dModel, int layers, Device device, GemmMode mode, long seed) {
        MambaModel model = MambaModel.builder(Mamba1Config.builder().dModel(dModel).layers(layers).build())
                .vocabSize(PADDED).device(device).gemmMode(mode).seed(seed).build();
        try {
            return new MambaLM(model, VOCAB, Tokenizer.fromJson(byteLevelTokenizerJson(), "byte-level demo tokenizer"));
        } catch (RuntimeException e) {
            model.close();
            throw e;
        }
    }

    /**
     * A HuggingFace tokenizer.json whose BPE has no merges: every byte is its own token, id = byte value, written
     * with GPT-2's byte-to-character alphabet (the ByteLevel pre-tokenizer and decoder speak it).
     */
    static String byteLevelTokenizerJson() {
        ObjectMapper json = new ObjectMapper();
        ObjectNode vocab = json.createObjectNode();
        int[] charOfByte = gpt2ByteAlphabet();
        for (int b = 0; b < 256; b++) vocab.put(new String(Character.toChars(charOfByte[b])), b);
        ObjectNode byteLevel = json.createObjectNode().put("type", "ByteLevel").put("add_prefix_space", false)
                .put("trim_offsets", true).put("use_regex", true);
        ObjectNode root = json.createObjectNode().put("version", "1.0");
        root.putNull("truncation");
        root.putNull("padding");
        ArrayNode added = root.putArray("added_tokens");
        added.addObject().put("id", EOS).put("content", "<|endoftext|>").put("single_word", false).put("lstrip", false)
                .put("rstrip", false).put("normalized", false).put("special", true);
        root.putNull("normalizer");
        root.set("pre_tokenizer", byteLevel);
        root.putNull("post_processor");
        root.set("decoder", byteLevel);
        ObjectNode model = root.putObject("model").put("type", "BPE").put("fuse_unk", false).put("byte_fallback", false);
        model.putNull("dropout");
        model.putNull("unk_token");
        model.putNull("continuing_subword_prefix");
        model.putNull("end_of_word_suffix");
        model.set("vocab", vocab);
        model.putArray("merges");
        return root.toString();
    }

    /** GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for code points from 256 up. */
    private static int[] gpt2ByteAlphabet() {
        int[] map = new int[256];
        int next = 256;
        for (int b = 0; b < 256; b++) {
            boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            map[b] = printable ? b : next++;
        }
        return map;
    }
}
