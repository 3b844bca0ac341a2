package org.mamba4j.lm;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import org.mamba4j.CheckpointException;
import org.mamba4j.Mamba1Config;
import org.mamba4j.Mamba3Config;
import org.mamba4j.MambaModel;
import org.mamba4j.io.SafeTensors;

/**
 * Writes a language model as a folder in the official state-spaces/mamba ({@code mamba_ssm}) layout:
 * {@code config.json} (a {@code MambaConfig}) and {@code model.safetensors} holding the {@code MambaLMHeadModel}
 * state dict's names and shapes, in f32. Both files are written atomically (temporary file + rename), the weights
 * first, so a failure leaves each file either as it was or complete.
 */
final class OfficialFolder {
    /** The official name of the token embedding ({@code MixerModel.embedding}); libmamba calls it HF's way. */
    static final String OFFICIAL_EMBEDDING = "backbone.embedding.weight";
    private static final String OUR_EMBEDDING = "backbone.embeddings.weight";
    private static final String LM_HEAD = "lm_head.weight";
    /** The multiple {@code MambaConfig} pads the vocabulary to by default. */
    private static final int DEFAULT_PAD = 8;

    private OfficialFolder() {}

    static void write(MambaLM lm, Path dir) {
        MambaModel model = lm.model();
        int padded = model.vocabSize();
        int pad = padMultiple(lm.vocabSize(), padded);
        String json;
        if (model.config() instanceof Mamba3Config c)
            json = new Mamba3LMConfig(c, lm.vocabSize(), pad, model.tieEmbeddings(), true, true).toJson();
        else if (model.config() instanceof Mamba1Config c)
            json = mamba1Json(c, lm.vocabSize(), pad, model.tieEmbeddings());
        else
            throw new IllegalStateException("no official layout for " + model.config().arch());
        List<SafeTensors.Entry> tensors = new ArrayList<>();
        for (String name : model.parameterNames()) {
            String key = name.equals(OUR_EMBEDDING) ? OFFICIAL_EMBEDDING : name;
            tensors.add(new SafeTensors.Entry(key, model.parameterShape(name), model.getParameter(name)));
        }
        if (model.tieEmbeddings()) {
            // The official state_dict() lists the tied head under its own name too; storing it keeps
            // load_state_dict(strict=True) happy. mamba4j's loader ignores it for a tied model.
            String embedding = OUR_EMBEDDING;
            tensors.add(new SafeTensors.Entry(LM_HEAD, model.parameterShape(embedding), model.getParameter(embedding)));
        }
        writeFolder(dir, tensors, json);
    }

    /** model.safetensors (PyTorch's "pt" format tag), then config.json, each atomically, into dir (created if needed). */
    static void writeFolder(Path dir, List<SafeTensors.Entry> tensors, String configJson) {
        try {
            Files.createDirectories(dir);
        } catch (IOException e) {
            throw new CheckpointException("cannot create the model folder " + dir + ": " + e, e);
        }
        SafeTensors.write(dir.resolve("model.safetensors"), Map.of("format", "pt"), tensors);
        writeAtomically(dir.resolve("config.json"), configJson);
    }

    /**
     * The {@code pad_vocab_size_multiple} that turns {@code vocab} into {@code padded} rows: the official 8 when
     * it does, else the smallest multiple that does.
     */
    static int padMultiple(int vocab, int padded) {
        if (pad(vocab, DEFAULT_PAD) == padded) return DEFAULT_PAD;
        for (int m = 1; m <= Math.min(padded, Mamba3LMConfig.MAX_PAD_MULTIPLE); m++)
            if (pad(vocab, m) == padded) return m;
        throw new IllegalStateException("no pad_vocab_size_multiple up to " + Mamba3LMConfig.MAX_PAD_MULTIPLE + " pads "
                + vocab + " tokens to the model's " + padded + " rows");
    }

    private static long pad(long vocab, long m) {
        return (vocab + m - 1) / m * m;
    }

    /** A Mamba-1 model's official config.json ({@code ssm_cfg.layer = "Mamba1"}), read back by {@link HfMambaConfig}. */
    private static String mamba1Json(Mamba1Config c, int vocab, int pad, boolean tie) {
        Map<String, Object> ssm = new LinkedHashMap<>();
        ssm.put("layer", "Mamba1");
        ssm.put("d_state", c.dState());
        ssm.put("d_conv", c.dConv());
        ssm.put("expand", c.expand());
        ssm.put("dt_rank", c.dtRank());
        ssm.put("dt_min", Mamba3LMConfig.decimal(c.dtMin()));
        ssm.put("dt_max", Mamba3LMConfig.decimal(c.dtMax()));
        ssm.put("dt_init_floor", Mamba3LMConfig.decimal(c.dtInitFloor()));
        ssm.put("conv_bias", true);
        ssm.put("bias", false);
        return Mamba3LMConfig.officialJson(c, c.normEps(), vocab, ssm, pad, tie, true, true);
    }

    /** Writes a small text file through a temporary sibling, forced to disk, then renamed over the target. */
    static void writeAtomically(Path file, String text) {
        Path target = file.toAbsolutePath();
        Path tmp = target.resolveSibling(target.getFileName() + ".tmp-" + Long.toHexString(ThreadLocalRandom.current().nextLong()));
        boolean moved = false;
        try {
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                ByteBuffer buf = ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
                while (buf.hasRemaining()) ch.write(buf);
                ch.force(true);
            }
            try {
                Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
            }
            moved = true;
        } catch (IOException e) {
            throw new CheckpointException("cannot write " + file + ": " + e, e);
        } finally {
            if (!moved) {
                try {
                    Files.deleteIfExists(tmp);
                } catch (IOException ignored) {
                    // the write's failure is what the caller needs to see
                }
            }
        }
    }
}
