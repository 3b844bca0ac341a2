package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.mamba4j.AdamW;
import org.mamba4j.DType;
import org.mamba4j.Device;
import org.mamba4j.StepResult;
import org.mamba4j.Trainer;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;

/**
 * Fine-tuning against HuggingFace transformers (issue 12 item 7): scripts/hf_finetune.py makes a tiny
 * MambaForCausalLM, token batches and AdamW settings, and fine-tunes it with {@code torch.optim.AdamW} in f32; this
 * test runs the same steps through {@link Trainer#stepTokens} from the same folder, F32, on the CPU and on CUDA
 * (when present), and compares
 * <ul>
 *   <li>the loss of every step: relative difference < 1e-4 (both are f32 means of B·(T−1) cross-entropies);
 *   <li>the weights after the last step, per tensor: relative L2 < 2e-3 — Adam divides each gradient element by its
 *       own running RMS, so elements whose gradients are near zero move by ±lr whatever their size, and f32 rounding
 *       differences between the two implementations show up there first (8 steps at lr 1e-4 bound it);
 *   <li>the no-decay groups: ours must be transformers' run's.
 * </ul>
 * It then saves the last device's fine-tuned model with {@link MambaLM#savePretrained} and its logits for a probe,
 * which {@code hf_finetune.py check} compares with transformers' own logits of that folder. The folder comes from
 * MAMBA4J_HF_FINETUNE or -Dmamba4j.hfFinetune (scripts/device-hf-finetune.sh makes it); skipped without it.
 */
@Tag("gpu")
class HfFinetuneComparisonTest {
    private static final double LOSS_REL = 1e-4, WEIGHT_REL = 2e-3;

    @Test
    void ourFineTuningTracksTransformersAndTransformersLoadsTheResult() throws Exception {
        String env = System.getProperty("mamba4j.hfFinetune", System.getenv("MAMBA4J_HF_FINETUNE"));
        Assumptions.assumeTrue(env != null && Files.isDirectory(Path.of(env)), "no MAMBA4J_HF_FINETUNE folder");
        Path root = Path.of(env);
        JsonNode s = new ObjectMapper().readTree(root.resolve("settings.json").toFile());
        int steps = s.get("steps").asInt(), B = s.get("batch").asInt(), T = s.get("seq_len").asInt();
        AdamW opt = AdamW.ofLearningRate(s.get("lr").asDouble()).betas(s.get("beta1").asDouble(), s.get("beta2").asDouble())
                .eps(s.get("eps").asDouble()).weightDecay(s.get("weight_decay").asDouble());
        float[] ids, losses;
        try (SafeTensorsFile ref = SafeTensorsFile.open(root.resolve("reference.safetensors"))) {
            ids = ref.readFloats("ids");
            losses = ref.readFloats("losses");
        }
        List<String> report = new ArrayList<>(), failures = new ArrayList<>();
        List<Device> devices = new ArrayList<>(List.of(Device.cpu()));
        if (Device.cudaCount() > 0) devices.add(Device.cuda(0));
        for (Device device : devices) {
            report.add("on " + device + ":");
            try (MambaLM lm = MambaLM.fromPretrained(root.resolve("initial"), device, DType.F32);
                 Trainer trainer = Trainer.builder(lm.model()).batch(B).seqLen(T).adamW(opt).clipGradNorm(s.get("clip").asDouble())
                         .build()) {
                for (JsonNode n : s.get("no_decay")) assertFalse(trainer.weightDecay(n.asText()), n.asText() + ": no decay");
                for (JsonNode n : s.get("decay")) assertTrue(trainer.weightDecay(n.asText()), n.asText() + ": decays");
                int[] x = new int[B * T], y = new int[B * T];
                for (int step = 0; step < steps; step++) {
                    for (int b = 0; b < B; b++)
                        for (int t = 0; t < T; t++) {
                            int at = (step * B + b) * T + t;
                            x[b * T + t] = (int) ids[at];
                            y[b * T + t] = t + 1 < T ? (int) ids[at + 1] : Trainer.DEFAULT_IGNORE_INDEX;
                        }
                    StepResult r = trainer.stepTokens(x, y);
                    double rel = Math.abs(r.loss() - losses[step]) / losses[step];
                    report.add(String.format("step %d: loss ours %.7f transformers %.7f rel %.2e", step + 1, r.loss(), losses[step], rel));
                    if (!(rel < LOSS_REL)) failures.add(device + " step " + (step + 1) + " loss rel " + rel);
                }
                try (SafeTensorsFile ref = SafeTensorsFile.open(root.resolve("reference.safetensors"))) {
                    for (String n : lm.model().parameterNames()) {
                        float[] theirs = ref.readFloats("final." + n), ours = lm.model().getParameter(n);
                        double rel = relL2(ours, theirs);
                        report.add(String.format("weights %-45s rel L2 %.2e", n, rel));
                        if (!(rel < WEIGHT_REL)) failures.add(device + " " + n + " weights rel L2 " + rel);
                    }
                }
                Path ours = root.resolve("ours");
                lm.savePretrained(ours);
                int[] probe = new int[T];
                for (int t = 0; t < T; t++) probe[t] = (int) ids[t];
                float[] probeIds = new float[T];
                for (int t = 0; t < T; t++) probeIds[t] = probe[t];
                float[] logits = lm.logits(probe);
                SafeTensors.write(ours.resolve("probe.safetensors"), Map.of(), List.of(
                        new SafeTensors.Entry("input_ids", new long[] {T}, probeIds),
                        new SafeTensors.Entry("logits", new long[] {T, lm.model().vocabSize()}, logits)));
            }
        }
        System.out.println("fine-tuning vs transformers:\n  " + String.join("\n  ", report));
        assertTrue(failures.isEmpty(), String.join("\n", failures) + "\n" + String.join("\n", report));
    }

    private static double relL2(float[] a, float[] b) {
        double d = 0, n = 0;
        for (int i = 0; i < a.length; i++) {
            d += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
            n += (double) b[i] * b[i];
        }
        return Math.sqrt(d / n);
    }
}
