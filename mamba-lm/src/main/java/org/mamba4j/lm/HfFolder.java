package org.mamba4j.lm;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.io.SafeTensors;

/**
 * Writes a Mamba-1 language model as a HuggingFace transformers folder ({@code MambaForCausalLM}, what
 * {@code save_pretrained} writes): {@code config.json} with transformers' {@code MambaConfig} keys and
 * {@code model.safetensors} with its state dict's names and shapes, in f32 — libmamba already names parameters
 * transformers' way. A tied head is not stored (transformers ties it on load). Both files are written atomically,
 * the weights first.
 *
 * <p>transformers knows one vocabulary size, the embedding's rows, so {@code vocab_size} is the model's padded row
 * count; {@link MambaLM#fromPretrained} reads the folder back with that vocabulary.
 */
final class HfFolder {
    private HfFolder() {}

    static void write(MambaLM lm, Path dir) {
        MambaModel model = lm.model();
        if (!(model.config() instanceof Mamba1Config c))
            throw new IllegalStateException("transformers has no class for " + model.config().arch()
                    + " models: save them with saveOfficial (the state-spaces/mamba layout)");
        String json = configJson(c, model.vocabSize(), model.tieEmbeddings());
        List<SafeTensors.Entry> tensors = new ArrayList<>();
        for (String name : model.parameterNames())
            tensors.add(new SafeTensors.Entry(name, model.parameterShape(name), model.getParameter(name)));
        OfficialFolder.writeFolder(dir, tensors, json);
    }

    /** transformers' MambaConfig for this shape; read back by {@link HfMambaConfig} (HF key style). */
    static String configJson(Mamba1Config c, int vocabRows, boolean tie) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("architectures", List.of("MambaForCausalLM"));
        m.put("model_type", "mamba");
        m.put("vocab_size", vocabRows);
        m.put("pad_vocab_size_multiple", OfficialFolder.padMultiple(vocabRows, vocabRows));  // mamba4j's loader pads by it
        m.put("hidden_size", c.dModel());
        m.put("intermediate_size", c.dInner());
        m.put("state_size", c.dState());
        m.put("num_hidden_layers", c.layers());
        m.put("layer_norm_epsilon", Mamba3LMConfig.decimal(c.normEps()));
        m.put("expand", c.expand());
        m.put("conv_kernel", c.dConv());
        m.put("use_bias", false);
        m.put("use_conv_bias", true);
        m.put("hidden_act", "silu");
        m.put("residual_in_fp32", true);
        m.put("time_step_rank", c.dtRank());
        m.put("time_step_scale", 1.0);
        m.put("time_step_min", Mamba3LMConfig.decimal(c.dtMin()));
        m.put("time_step_max", Mamba3LMConfig.decimal(c.dtMax()));
        m.put("time_step_init_scheme", "random");
        m.put("time_step_floor", Mamba3LMConfig.decimal(c.dtInitFloor()));
        m.put("rescale_prenorm_residual", false);
        m.put("tie_word_embeddings", tie);
        m.put("use_cache", true);
        m.put("torch_dtype", "float32");
        return JsonKeys.prettyJson(m);
    }
}
