/**
 * Data-parallel training: {@link org.mamba4j.parallel.DataParallelTrainer} runs one
 * {@link org.mamba4j.Trainer} replica per device or rank and sums their gradients through a
 * {@link org.mamba4j.parallel.Communicator} — {@link org.mamba4j.parallel.InProcessCommunicator} (threads of one
 * process), {@link org.mamba4j.parallel.TcpCommunicator} (processes over TCP, host arrays) or
 * {@link org.mamba4j.parallel.NcclCommunicator} (CUDA devices over NCCL). Multi-process jobs are launched in
 * torchrun's convention ({@link org.mamba4j.parallel.LaunchConfig}). Design, determinism and launch forms:
 * docs/data-parallel.md.
 */
package org.mamba4j.parallel;
