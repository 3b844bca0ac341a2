/**
 * Language models on top of the core API (artifact {@code org.mamba4j:mamba-lm}; {@code mamba4j-platform} includes
 * it): HuggingFace and official state-spaces folders, tokenizers, sampling and generation. The core
 * ({@code mamba-api}) does not depend on this package or on its libraries (DJL's tokenizers, JNA).
 *
 * <ul>
 *   <li>{@link org.mamba4j.lm.Sampling}: immutable decoding settings (temperature, top-k, top-p, min-p,
 *       repetition penalty, seed, length, stop tokens).
 *   <li>{@link org.mamba4j.lm.TokenSampler}: picks the next token of one sequence from its logits,
 *       in the order of HuggingFace transformers' logits processors, reproducibly from a seed.
 *   <li>{@link org.mamba4j.lm.HfMambaConfig}: the architecture read from a checkpoint's {@code
 *       config.json}, in the transformers ({@code *-hf}) or the original state-spaces layout (Mamba-1).
 *   <li>{@link org.mamba4j.lm.Mamba3LMConfig}: a Mamba-3 SISO language model's official state-spaces
 *       {@code config.json} ({@code ssm_cfg.layer = "Mamba3"}), read and written.
 *   <li>{@link org.mamba4j.lm.MambaLM}: loads either kind of folder, generates, and writes the official
 *       state-spaces layout ({@link org.mamba4j.lm.MambaLM#saveOfficial}).
 *   <li>{@link org.mamba4j.lm.Generator}: a continuous-batching engine: requests ({@link
 *       org.mamba4j.lm.GenerationRequest}) from many threads share batched decode steps and come back as futures
 *       of a {@link org.mamba4j.lm.Completion}, token streams and callbacks ({@link org.mamba4j.lm.GenerationHandle}).
 *   <li>{@link org.mamba4j.lm.Tokenizer}: a {@code tokenizer.json} tokenizer (DJL's bindings to the
 *       Rust tokenizers library, native code bundled in the jar) with a streaming decoder. It never
 *       touches the network: see its class documentation for the DJL system properties it sets.
 * </ul>
 */
package org.mamba4j.lm;
