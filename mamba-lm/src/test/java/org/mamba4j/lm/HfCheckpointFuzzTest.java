package org.mamba4j.lm;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.Mamba1Config;
import org.mamba4j.MambaModel;
import org.mamba4j.fuzz.FuzzChecks;
import org.mamba4j.io.SafeTensors;

/**
 * Coverage-guided fuzzing of a sharded HuggingFace folder: the input is a {@code config.json} and a
 * {@code model.safetensors.index.json} (separated by a line {@code =====}), next to two fixed, valid shards of a
 * tiny language model; the folder is opened and loaded onto the CPU. Shard names come from the input, so this
 * also fuzzes the "shards must be plain files in the folder" rule. Seeds: {@code HfCheckpointFuzzTestInputs}.
 */
class HfCheckpointFuzzTest {
    static final String SHARD_1 = "model-00001-of-00002.safetensors", SHARD_2 = "model-00002-of-00002.safetensors";
    /** The tiny model of the shards (its config.json is in the seeds). */
    static final Mamba1Config CONFIG = Mamba1Config.builder().dModel(4).dState(2).dConv(2).expand(1).dtRank(1).layers(1).build();
    static final int VOCAB = 8;
    private static Path folder;

    /** Writes the two shards: the first holds the embedding and every tensor of the first half of the parameter order. */
    @BeforeAll
    static void shards() {
        folder = FuzzChecks.scratch("hf-folder");
        List<SafeTensors.Entry> first = new ArrayList<>(), second = new ArrayList<>();
        try (MambaModel m = MambaModel.builder(CONFIG).vocabSize(VOCAB).seed(5).build()) {
            List<String> names = m.parameterNames();
            for (int i = 0; i < names.size(); i++)
                (i < names.size() / 2 ? first : second).add(new SafeTensors.Entry(names.get(i), m.parameterShape(names.get(i)),
                        m.getParameter(names.get(i))));
        }
        SafeTensors.write(folder.resolve(SHARD_1), Map.of("format", "pt"), first);
        SafeTensors.write(folder.resolve(SHARD_2), Map.of("format", "pt"), second);
    }

    @FuzzTest(maxDuration = "5s")  // the build's bounded run; scripts/fuzz.sh runs longer
    @DictionaryEntries({"\"weight_map\"", "\"metadata\"", "\"total_size\"", "\"" + SHARD_1 + "\"", "\"" + SHARD_2 + "\"",
            "\"../\"", "\"/\"", "\\u0000", "\"backbone.embeddings.weight\"", "\"backbone.embedding.weight\"", "\"lm_head.weight\"",
            "\"backbone.norm_f.weight\"", "\"hidden_size\"", "\"vocab_size\"", "\"tie_word_embeddings\"", "\"use_conv_bias\"",
            "\"ssm_cfg\"", "\"layer\"", "\"Mamba3\"", "\"d_model\"", "\"n_layer\"", "\"headdim\""})
    void openAndLoadShardedFolder(byte[] data) {
        Map<String, byte[]> files = FuzzChecks.split(data, "config.json", "model.safetensors.index.json");
        FuzzChecks.folder(folder, files, List.of(SHARD_1, SHARD_2), dir -> {
            try (HfCheckpoint c = HfCheckpoint.open(dir); MambaModel m = c.load(Device.cpu(), DType.F32, (name, done, total) -> { })) {
                m.parameterCount();
            }
        });
    }

    @AfterAll
    static void report() {
        FuzzChecks.report("hf-sharded-folder");
    }
}
