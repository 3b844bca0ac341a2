package org.mamba4j.lm;

import static org.mamba4j.fuzz.SeedCorpus.quote;
import static org.mamba4j.fuzz.SeedCorpus.text;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;

/**
 * Writes the hand-made seed files of mamba-lm's fuzz targets under {@code src/test/resources} (run once from the module
 * folder: {@code java -cp <test class path> org.mamba4j.lm.LmSeedCorpus}), as mamba-api's
 * {@code org.mamba4j.fuzz.SeedCorpus} does for the core formats. The files are checked in; this class documents where
 * they came from.
 */
public final class LmSeedCorpus {
    private static final Path RESOURCES = Path.of("src/test/resources/org/mamba4j/lm");

    private LmSeedCorpus() {}

    public static void main(String[] args) throws IOException {
        hfConfigs();
        mamba3Configs();
        hfIndex();
        tokenizers();
        System.out.println("seeds written under " + RESOURCES.toAbsolutePath());
    }

    private static void mamba3Configs() throws IOException {
        Path dir = RESOURCES.resolve("Mamba3LMConfigFuzzTestInputs");
        text(dir.resolve("official-defaults"), MAMBA3_DEFAULTS);
        text(dir.resolve("every-key"), MAMBA3_EVERY_KEY);
    }

    static final String MAMBA3_DEFAULTS = "{\"d_model\": 256, \"n_layer\": 2, \"vocab_size\": 50277, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}";
    static final String MAMBA3_EVERY_KEY = "{\"d_model\": 96, \"d_intermediate\": 0, \"n_layer\": 3, \"vocab_size\": 1000,"
            + " \"ssm_cfg\": {\"layer\": \"Mamba3\", \"d_state\": 32, \"expand\": 4, \"headdim\": 16, \"ngroups\": 2,"
            + " \"rope_fraction\": 1.0, \"A_floor\": 0.0001, \"dt_min\": 0.001, \"dt_max\": 0.1, \"dt_init_floor\": 0.0001,"
            + " \"chunk_size\": 64, \"is_outproj_norm\": true, \"is_mimo\": false, \"mimo_rank\": 4, \"dropout\": 0.0},"
            + " \"attn_layer_idx\": [], \"attn_cfg\": {}, \"rms_norm\": true, \"residual_in_fp32\": true, \"fused_add_norm\": true,"
            + " \"pad_vocab_size_multiple\": 8, \"tie_embeddings\": false}";

    private static void hfConfigs() throws IOException {
        Path dir = RESOURCES.resolve("HfConfigFuzzTestInputs");
        text(dir.resolve("transformers-130m"), "{\"model_type\": \"mamba\", \"hidden_size\": 768, \"state_size\": 16,"
                + " \"num_hidden_layers\": 24, \"expand\": 2, \"intermediate_size\": 1536, \"conv_kernel\": 4,"
                + " \"time_step_rank\": 48, \"layer_norm_epsilon\": 1e-05, \"use_bias\": false, \"use_conv_bias\": true,"
                + " \"vocab_size\": 50280, \"pad_vocab_size_multiple\": 8, \"tie_word_embeddings\": true,"
                + " \"hidden_act\": \"silu\", \"residual_in_fp32\": true}");
        text(dir.resolve("state-spaces-370m"), "{\"d_model\": 1024, \"n_layer\": 48, \"vocab_size\": 50277,"
                + " \"ssm_cfg\": {\"d_state\": 16, \"d_conv\": 4, \"expand\": 2, \"dt_rank\": \"auto\", \"conv_bias\": true,"
                + " \"bias\": false, \"layer\": \"Mamba1\"}, \"rms_norm\": true, \"residual_in_fp32\": true,"
                + " \"fused_add_norm\": true, \"pad_vocab_size_multiple\": 8, \"tie_embeddings\": true, \"norm_epsilon\": 1e-5,"
                + " \"attn_layer_idx\": []}");
        text(dir.resolve("transformers-minimal-rms-eps"), "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 100,"
                + " \"rms_norm_eps\": 1e-6}");
        text(dir.resolve("falcon-rejected"), "{\"model_type\": \"falcon_mamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
                + " \"vocab_size\": 100}");
    }

    private static void hfIndex() throws IOException {
        Path dir = RESOURCES.resolve("HfCheckpointFuzzTestInputs");
        String config = "{\"model_type\": \"mamba\", \"hidden_size\": 4, \"state_size\": 2, \"num_hidden_layers\": 1,"
                + " \"expand\": 1, \"conv_kernel\": 2, \"time_step_rank\": 1, \"vocab_size\": 8, \"tie_word_embeddings\": true}";
        String[] shard = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
        Map<String, long[]> shapes = MambaModel.builder(Mamba1Config.builder().dModel(4).dState(2).dConv(2).expand(1).dtRank(1)
                .layers(1).build()).vocabSize(8).parameterShapes();
        List<String> names = new ArrayList<>(shapes.keySet());
        StringBuilder map = new StringBuilder();
        for (int i = 0; i < names.size(); i++)
            map.append(i == 0 ? "" : ", ").append(quote(names.get(i))).append(": ").append(quote(shard[i < names.size() / 2 ? 0 : 1]));
        text(dir.resolve("valid-two-shards"), config + "\n=====\n{\"metadata\": {\"total_size\": 1000}, \"weight_map\": {" + map + "}}");
        // config.json decides the architecture: a Mamba-3 config over the Mamba-1 shards is read, then refused by tensor name
        text(dir.resolve("mamba3-config-over-mamba1-shards"), "{\"d_model\": 4, \"n_layer\": 1, \"vocab_size\": 8, \"ssm_cfg\":"
                + " {\"layer\": \"Mamba3\", \"d_state\": 4, \"headdim\": 4, \"expand\": 1}}\n=====\n{\"metadata\": {\"total_size\": 1000},"
                + " \"weight_map\": {" + map + "}}");
        text(dir.resolve("escaping-shard-name"), config + "\n=====\n{\"weight_map\": {" + quote(names.get(0)) + ": \"../outside.safetensors\"}}");
    }

    private static void tokenizers() throws IOException {
        Path dir = RESOURCES.resolve("TokenizerFuzzTestInputs");
        String bpe = "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 0, \"content\": \"<|endoftext|>\", \"special\": true,"
                + " \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false}],"
                + " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
                + " \"trim_offsets\": true, \"use_regex\": true}, \"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\","
                + " \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, \"model\": {\"type\": \"BPE\","
                + " \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null,"
                + " \"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": {\"<|endoftext|>\": 0, \"h\": 1, \"i\": 2, \"hi\": 3},"
                + " \"merges\": [\"h i\"]}}";
        text(dir.resolve("bpe"), bpe);
        text(dir.resolve("bpe-with-config"), bpe + "\n=====\n{\"eos_token\": {\"content\": \"<|endoftext|>\"}}");
        text(dir.resolve("wordlevel"), "{\"version\": \"1.0\", \"added_tokens\": [], \"model\": {\"type\": \"WordLevel\","
                + " \"vocab\": {\"a\": 0, \"b\": 1, \"[UNK]\": 2}, \"unk_token\": \"[UNK]\"}, \"pre_tokenizer\": {\"type\": \"Whitespace\"}}");
    }
}
