/**
 * Mamba state-space models on the CPU and on CUDA GPUs: inference, training and checkpoints.
 *
 * <ul>
 *   <li>{@link org.mamba4j.MambaModel} — a Mamba-1 backbone built from a {@link org.mamba4j.Mamba1Config} on a
 *       {@link org.mamba4j.Device} with a {@link org.mamba4j.DType}; {@code step}, {@code prefill}, {@code forward},
 *       parameters by HuggingFace name, {@code save}/{@code load}.
 *   <li>{@link org.mamba4j.MambaState} — the recurrent state of a batch of sequences.
 *   <li>{@link org.mamba4j.Trainer} — backpropagation through time with AdamW, clipping, schedules and loss heads.
 *   <li>{@link org.mamba4j.Tensor} — a buffer on a device, for GPU pipelines without host copies and for interop with
 *       other native code through {@link org.mamba4j.Tensor#pointer()}.
 * </ul>
 *
 * <pre>{@code
 * Mamba1Config config = Mamba1Config.builder().dModel(128).layers(3).build();
 * try (MambaModel model = MambaModel.builder(config).inputDim(32).device(Device.best()).seed(42).build();
 *      MambaState state = model.newState(4)) {
 *     float[] y = model.step(state, new float[4 * 32]);   // one step for 4 sequences: [4 * 128] outputs
 * }
 * }</pre>
 *
 * <p>Language models (HuggingFace folders, tokenizers, generation: {@code org.mamba4j.lm}) are in the artifact
 * {@code org.mamba4j:mamba-lm}, which {@code mamba4j-platform} includes.
 *
 * <p>The natives come from {@code org.mamba4j:mamba4j-platform} (or {@code mamba-presets-platform}); every native
 * object is {@link java.lang.AutoCloseable}. Debug logging (native loading, device selection) goes through
 * {@link java.lang.System.Logger}, loggers {@code org.mamba4j.*}.
 */
package org.mamba4j;
