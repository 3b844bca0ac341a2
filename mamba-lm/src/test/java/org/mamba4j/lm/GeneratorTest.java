package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.mamba4j.Device;
import org.mamba4j.GemmMode;
import org.mamba4j.ModelConfig;

/**
 * The continuous-batching {@link Generator} on the CPU with tiny random models: every request equals its solo run
 * through {@link MambaLM#generate} bit for bit (DETERMINISTIC products), while requests of different prompt lengths
 * (several prefill chunks, batched chunks), samplings and lengths join and leave; streaming, cancellation,
 * concurrent submission, close, and refused input.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class GeneratorTest {
    /** Long enough that a request never ends on its own while a test holds it (a tiny model does ~10k steps/s). */
    static final int LONG = 1_000_000;

    /** A mix of samplings: greedy, temperature with filters, repetition penalty, stop tokens; distinct seeds. */
    static Sampling sampling(Random rng, int i) {
        Sampling s = switch (i % 4) {
            case 0 -> Sampling.greedy();
            case 1 -> Sampling.ofTemperature(0.9).topK(8).topP(0.9);
            case 2 -> Sampling.ofTemperature(1.2).repetitionPenalty(1.3).minP(0.02);
            default -> Sampling.ofTemperature(0.7).stopTokens(5, 9);
        };
        return s.seed(rng.nextLong()).maxNewTokens(1 + rng.nextInt(40));
    }

    /** Submits many requests (from several threads) and checks each against lm.generate alone, bit for bit. */
    static void everyRequestEqualsItsSoloRun(MambaLM lm, int requests, int threads) throws Exception {
        everyRequestEqualsItsSoloRun(lm, requests, threads, 0);
    }

    /**
     * Every request's tokens equal its solo run; the logits behind them equal one forward pass over the whole
     * sequence bitwise ({@code forwardTolerance} 0) or within that relative L2 error (CUDA, whose full-sequence
     * scan may round differently from decode steps in the last bits).
     */
    static void everyRequestEqualsItsSoloRun(MambaLM lm, int requests, int threads, double forwardTolerance)
            throws Exception {
        Random rng = new Random(42);
        List<int[]> prompts = new ArrayList<>();
        List<Sampling> samplings = new ArrayList<>();
        for (int i = 0; i < requests; i++) {
            // lengths 1 … 90 with a chunk of 16: one-chunk prompts, several chunks, equal-length groups
            prompts.add(TinyLanguageModels.prompt(rng, i % 5 == 0 ? 1 + rng.nextInt(90) : 1 + rng.nextInt(12)));
            samplings.add(sampling(rng, i));
        }
        List<CompletableFuture<Completion>> results = new ArrayList<>();
        try (Generator gen = Generator.builder(lm).slots(4).prefillChunk(16).prefillTokensPerStep(40).prefillBatch(4)
                .samplingThreads(2).build()) {
            gen.logLogits = true;
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            List<GenerationHandle> handles = new ArrayList<>();
            try {
                CountDownLatch start = new CountDownLatch(1);
                List<Future<GenerationHandle>> submitted = new ArrayList<>();
                for (int i = 0; i < requests; i++) {
                    int k = i;
                    submitted.add(pool.submit(() -> {
                        start.await();
                        return gen.submit(GenerationRequest.ofTokens(prompts.get(k), samplings.get(k)));
                    }));
                }
                start.countDown();
                for (var f : submitted) handles.add(f.get(60, TimeUnit.SECONDS));
                for (var h : handles) results.add(h.result());
            } finally {
                pool.shutdownNow();
            }
            // parked rows live on the device in reused one-row states: only the few requests between chunks hold one
            for (CompletableFuture<Completion> r : results) r.get(60, TimeUnit.SECONDS);
            assertTrue(gen.parkingStates() <= 40 / 16 + 1, "parking states: " + gen.parkingStates());
            for (int i = 0; i < requests; i++) {
                Completion c = results.get(i).get(60, TimeUnit.SECONDS);
                int[] solo = lm.generate(prompts.get(i), samplings.get(i), TokenListener.NONE);
                assertArrayEquals(solo, c.tokens(), "request " + i + " (prompt " + prompts.get(i).length + " tokens, "
                        + samplings.get(i) + ") vs its solo run");
                Sampling s = samplings.get(i);
                FinishReason want = s.isStopToken(solo[solo.length - 1]) ? FinishReason.STOP : FinishReason.LENGTH;
                assertEquals(want, c.finishReason(), "request " + i);
                assertEquals(prompts.get(i).length, c.promptTokens());
                // and the logits behind every token are bitwise those of one forward pass over the whole sequence
                int P = prompts.get(i).length, n = solo.length, V = lm.model().vocabSize();
                int[] seq = java.util.Arrays.copyOf(prompts.get(i), P + n - 1);
                System.arraycopy(solo, 0, seq, P, n - 1);
                float[] all = lm.model().forwardTokens(null, seq, 1, seq.length);
                List<float[]> seen = handles.get(i).logitsLog;
                assertEquals(n, seen.size());
                for (int t = 0; t < n; t++) {
                    int at = (P - 1 + t) * V;
                    float[] fromForward = java.util.Arrays.copyOfRange(all, at, at + lm.vocabSize());
                    if (forwardTolerance == 0) {
                        assertArrayEquals(fromForward, seen.get(t), "request " + i + ": logits of token " + t);
                    } else {
                        double rel = relL2(fromForward, seen.get(t));
                        assertTrue(rel <= forwardTolerance, "request " + i + ": logits of token " + t + " rel L2 " + rel);
                    }
                }
            }
        }
    }

    private static double relL2(float[] want, float[] got) {
        double num = 0, den = 0;
        for (int i = 0; i < want.length; i++) {
            double d = (double) got[i] - want[i];
            num += d * d;
            den += (double) want[i] * want[i];
        }
        return Math.sqrt(num / Math.max(den, Double.MIN_NORMAL));
    }

    @Test
    void mamba1RequestsEqualTheirSoloRunsBitForBit() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false)) {
            everyRequestEqualsItsSoloRun(lm, 40, 8);
        }
    }

    @Test
    void mamba3RequestsEqualTheirSoloRunsBitForBit() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba3(), Device.cpu(), GemmMode.DETERMINISTIC, false)) {
            everyRequestEqualsItsSoloRun(lm, 24, 4);
        }
    }

    @Test
    void concurrentSubmissionFromManyThreads() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false);
             Generator gen = Generator.builder(lm).slots(6).build()) {
            int threads = 16, each = 12;
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            CountDownLatch start = new CountDownLatch(1);
            List<Future<List<int[]>>> work = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int thread = t;
                work.add(pool.submit(() -> {
                    start.await();
                    List<CompletableFuture<Completion>> mine = new ArrayList<>();
                    for (int i = 0; i < each; i++) {
                        int[] p = {thread % TinyLanguageModels.VOCAB, i % TinyLanguageModels.VOCAB, 3};
                        mine.add(gen.generate(p, Sampling.ofTemperature(0.8).seed(thread * 100L + i).maxNewTokens(8)));
                    }
                    List<int[]> out = new ArrayList<>();
                    for (var f : mine) out.add(f.get(60, TimeUnit.SECONDS).tokens());
                    return out;
                }));
            }
            start.countDown();
            for (int t = 0; t < threads; t++) {
                List<int[]> got = work.get(t).get(90, TimeUnit.SECONDS);
                for (int i = 0; i < each; i += 5) {  // a sample of them against their solo runs
                    int[] p = {t % TinyLanguageModels.VOCAB, i % TinyLanguageModels.VOCAB, 3};
                    assertArrayEquals(lm.generate(p, Sampling.ofTemperature(0.8).seed(t * 100L + i).maxNewTokens(8),
                            TokenListener.NONE), got.get(i), "thread " + t + " request " + i);
                }
            }
            pool.shutdownNow();
        }
    }

    @Test
    void requestsJoinAndLeaveWhileOthersDecode() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false);
             Generator gen = Generator.builder(lm).slots(2).maxNewTokens(LONG).build()) {
            CountDownLatch longStarted = new CountDownLatch(5);
            GenerationHandle longOne = gen.submit(GenerationRequest.ofTokens(new int[] {1, 2, 3},
                    Sampling.greedy().maxNewTokens(LONG)).listener((tok, text) -> longStarted.countDown()));
            assertTrue(longStarted.await(30, TimeUnit.SECONDS));
            // two short requests take turns in the second slot while the long one keeps decoding
            for (int i = 0; i < 2; i++) {
                int[] p = {4 + i, 7};
                Sampling s = Sampling.ofTemperature(1.0).seed(i).maxNewTokens(6);
                Completion c = gen.generate(p, s).get(30, TimeUnit.SECONDS);
                assertArrayEquals(lm.generate(p, s, TokenListener.NONE), c.tokens());
                assertFalse(longOne.isDone(), "the long request is still decoding");
            }
            // its stream so far is a prefix of its solo run
            List<GeneratedToken> sofar = longOne.tokensSoFar();
            assertTrue(longOne.cancel());
            int[] solo = lm.generate(new int[] {1, 2, 3}, Sampling.greedy().maxNewTokens(sofar.size()), TokenListener.NONE);
            for (int i = 0; i < sofar.size(); i++) assertEquals(solo[i], sofar.get(i).id(), "token " + i);
        }
    }

    @Test
    void streamingIteratorAndListenerSeeEveryToken() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, true);
             Generator gen = Generator.builder(lm).slots(3).build()) {
            Sampling s = Sampling.ofTemperature(0.9).seed(11).maxNewTokens(30);
            StringBuilder heard = new StringBuilder();
            List<Integer> heardIds = new ArrayList<>();
            GenerationHandle h = gen.submit(GenerationRequest.ofText("hello world", s).listener((tok, text) -> {
                heardIds.add(tok);
                heard.append(text);
            }));
            StringBuilder streamed = new StringBuilder();
            List<Integer> ids = new ArrayList<>();
            for (GeneratedToken t : h) {
                ids.add(t.id());
                streamed.append(t.text());
            }
            Completion c = h.result().get(30, TimeUnit.SECONDS);
            assertEquals(ids, heardIds);
            assertArrayEquals(ids.stream().mapToInt(Integer::intValue).toArray(), c.tokens());
            assertEquals(c.text(), streamed.toString());
            assertEquals(c.text(), heard.toString());
            // the same as MambaLM's text generation (which also stops at the end-of-text token)
            StringBuilder solo = new StringBuilder();
            assertEquals(lm.generate("hello world", s, solo::append), c.text());
            assertEquals(2, c.promptTokens());  // "hello" " world"
        }
    }

    @Test
    void stopStringsCutTheTextAndEndTheRequest() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, true);
             Generator gen = Generator.builder(lm).slots(2).build()) {
            // find a seed whose free text is long, then stop at a piece of its middle
            Sampling s = null;
            String full = null;
            for (int seed = 0; seed < 50 && full == null; seed++) {
                Sampling t = Sampling.ofTemperature(1.0).seed(seed).maxNewTokens(40);
                String text = gen.generate("hello", t).get(30, TimeUnit.SECONDS).text();
                if (text.length() >= 12) {
                    s = t;
                    full = text;
                }
            }
            assertTrue(full != null, "some seed generates at least 12 characters");
            String stop = full.substring(6, 9);
            int cut = full.indexOf(stop);
            StringBuilder streamed = new StringBuilder();
            Completion c = gen.submit(GenerationRequest.ofText("hello", s).stopStrings("\u2603never", stop)
                    .listener((tok, text) -> streamed.append(text))).result().get(30, TimeUnit.SECONDS);
            assertEquals(full.substring(0, cut), c.text());
            assertEquals(c.text(), streamed.toString(), "no piece of the stop string was streamed");
            assertEquals(FinishReason.STOP, c.finishReason());
        }
    }

    @Test
    void cancellationFreesTheSlotAndEndsTheStream() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false);
             Generator gen = Generator.builder(lm).slots(1).maxNewTokens(LONG).build()) {
            GenerationHandle running = gen.submit(GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy().maxNewTokens(LONG)));
            AtomicInteger queuedHeard = new AtomicInteger();
            GenerationHandle queued = gen.submit(GenerationRequest.ofTokens(new int[] {2}, Sampling.greedy().maxNewTokens(5))
                    .listener((t, x) -> queuedHeard.incrementAndGet()));
            assertTrue(queued.cancel(), "cancelled while waiting for the only slot");
            int seen = 0;
            var it = running.iterator();
            while (seen < 10 && it.hasNext()) {
                it.next();
                seen++;
            }
            assertTrue(running.cancel());
            assertThrows(CancellationException.class, () -> {
                while (it.hasNext()) it.next();
            });
            assertThrows(CancellationException.class, () -> running.result().join());
            assertTrue(running.result().isCancelled());
            // the slot is free again: the next request runs and is right
            Completion c = gen.generate(new int[] {3, 4}, Sampling.greedy().maxNewTokens(7)).get(30, TimeUnit.SECONDS);
            assertArrayEquals(lm.generate(new int[] {3, 4}, Sampling.greedy().maxNewTokens(7), TokenListener.NONE), c.tokens());
            assertEquals(0, queuedHeard.get(), "a request cancelled in the queue never runs");
            // cancelling the future itself cancels the request too
            CompletableFuture<Completion> f = gen.generate(new int[] {1}, Sampling.greedy().maxNewTokens(LONG));
            assertTrue(f.cancel(true));
            assertEquals(7, gen.generate(new int[] {3, 4}, Sampling.greedy().maxNewTokens(7)).get(30, TimeUnit.SECONDS).tokenCount());
        }
    }

    @Test
    void aFailingListenerFailsOnlyItsRequest() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false);
             Generator gen = Generator.builder(lm).slots(2).build()) {
            GenerationHandle bad = gen.submit(GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy().maxNewTokens(50))
                    .listener((t, x) -> {
                        throw new IllegalStateException("listener broke");
                    }));
            CompletableFuture<Completion> good = gen.generate(new int[] {2}, Sampling.greedy().maxNewTokens(20));
            ExecutionException e = assertThrows(ExecutionException.class, () -> bad.result().get(30, TimeUnit.SECONDS));
            assertEquals("listener broke", e.getCause().getMessage());
            assertEquals(20, good.get(30, TimeUnit.SECONDS).tokenCount());
            assertThrows(CompletionException.class, () -> bad.iterator().forEachRemaining(t -> {}));
        }
    }

    @Test
    void closeFailsUnfinishedRequestsAndRefusesNewOnes() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false)) {
            Generator gen = Generator.builder(lm).slots(1).maxNewTokens(LONG).build();
            CountDownLatch decoding = new CountDownLatch(3);
            GenerationHandle running = gen.submit(GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy().maxNewTokens(LONG))
                    .listener((t, x) -> decoding.countDown()));
            GenerationHandle queued = gen.submit(GenerationRequest.ofTokens(new int[] {2}, Sampling.greedy()));
            assertTrue(decoding.await(30, TimeUnit.SECONDS));
            gen.close();
            for (GenerationHandle h : List.of(running, queued)) {
                ExecutionException e = assertThrows(ExecutionException.class, () -> h.result().get(30, TimeUnit.SECONDS));
                assertInstanceOf(GeneratorClosedException.class, e.getCause());
                assertTrue(e.getCause().getMessage().contains("closed"), e.getCause().getMessage());
            }
            GeneratorClosedException refused = assertThrows(GeneratorClosedException.class,
                    () -> gen.generate(new int[] {1}, Sampling.greedy()));
            assertTrue(refused.getMessage().contains("closed"));
            assertTrue(gen.isClosed());
            gen.close();  // idempotent
            // the language model is still open and usable
            assertEquals(3, lm.generate(new int[] {1}, Sampling.greedy().maxNewTokens(3), TokenListener.NONE).length);
        }
    }

    @Test
    void closeFromAListenerDoesNotDeadlock() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false)) {
            Generator gen = Generator.builder(lm).slots(1).build();
            Generator[] self = {gen};
            GenerationHandle h = gen.submit(GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy().maxNewTokens(100))
                    .listener((t, x) -> self[0].close()));
            ExecutionException e = assertThrows(ExecutionException.class, () -> h.result().get(30, TimeUnit.SECONDS));
            assertInstanceOf(GeneratorClosedException.class, e.getCause());
            gen.close();
        }
    }

    @Test
    void aModelClosedUnderTheGeneratorFailsEveryRequestClearly() throws Exception {
        MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false);
        try (Generator gen = Generator.builder(lm).slots(1).maxNewTokens(LONG).build()) {
            CountDownLatch decoding = new CountDownLatch(2);
            GenerationHandle running = gen.submit(GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy().maxNewTokens(LONG))
                    .listener((t, x) -> decoding.countDown()));
            assertTrue(decoding.await(30, TimeUnit.SECONDS));
            lm.close();  // the engine's next step fails: every request fails with that error, the engine stops
            ExecutionException e = assertThrows(ExecutionException.class, () -> running.result().get(30, TimeUnit.SECONDS));
            assertInstanceOf(IllegalStateException.class, e.getCause());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!gen.isClosed() && System.nanoTime() < deadline) Thread.sleep(5);
            GeneratorClosedException refused = assertThrows(GeneratorClosedException.class,
                    () -> gen.generate(new int[] {1}, Sampling.greedy()));
            assertTrue(refused.getMessage().contains("stopped after an error"), refused.getMessage());
        }
    }

    @Test
    void badInputIsRefusedWithClearMessages() throws Exception {
        try (MambaLM lm = TinyLanguageModels.lm(TinyLanguageModels.mamba1(), Device.cpu(), GemmMode.DETERMINISTIC, false);
             Generator gen = Generator.builder(lm).slots(1).maxPromptTokens(8).maxNewTokens(100).maxQueued(1).build()) {
            assertMessage(IllegalArgumentException.class, "empty", () -> gen.generate(new int[0], Sampling.greedy()));
            assertMessage(IllegalArgumentException.class, "outside the vocabulary",
                    () -> gen.generate(new int[] {1, 22}, Sampling.greedy()));
            assertMessage(IllegalArgumentException.class, "outside the vocabulary",
                    () -> gen.generate(new int[] {-1}, Sampling.greedy()));
            assertMessage(IllegalArgumentException.class, "9 tokens, more than this generator's limit of 8",
                    () -> gen.generate(new int[9], Sampling.greedy()));
            assertMessage(IllegalArgumentException.class, "above this generator's limit of 100",
                    () -> gen.generate(new int[] {1}, Sampling.greedy().maxNewTokens(101)));
            assertMessage(IllegalArgumentException.class, "tokenizer", () -> gen.generate("hello", Sampling.greedy().maxNewTokens(5)));
            assertMessage(IllegalArgumentException.class, "tokenizer",
                    () -> gen.submit(GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy().maxNewTokens(5)).stopStrings("x")));
            assertThrows(IllegalArgumentException.class, () -> GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy()).stopStrings(""));
            assertThrows(NullPointerException.class, () -> gen.submit(null));
            // the queue limit: one request decoding (held in its listener), one waiting, the next refused
            CountDownLatch hold = new CountDownLatch(1), decoding = new CountDownLatch(1);
            GenerationHandle a = gen.submit(GenerationRequest.ofTokens(new int[] {1}, Sampling.greedy().maxNewTokens(3))
                    .listener((t, x) -> {
                        decoding.countDown();
                        try {
                            hold.await();
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    }));
            assertTrue(decoding.await(30, TimeUnit.SECONDS));
            CompletableFuture<Completion> b = gen.generate(new int[] {2}, Sampling.greedy().maxNewTokens(3));
            assertMessage(RejectedExecutionException.class, "waiting", () -> gen.generate(new int[] {3}, Sampling.greedy().maxNewTokens(3)));
            hold.countDown();
            assertEquals(3, a.result().get(30, TimeUnit.SECONDS).tokenCount());
            assertEquals(3, b.get(30, TimeUnit.SECONDS).tokenCount());
        }
        assertThrows(NullPointerException.class, () -> Generator.builder(null));
    }

    private static void assertMessage(Class<? extends Throwable> type, String part, org.junit.jupiter.api.function.Executable call) {
        Throwable t = assertThrows(type, call);
        assertTrue(t.getMessage() != null && t.getMessage().contains(part), "message \"" + t.getMessage() + "\" lacks \"" + part + "\"");
    }
}
