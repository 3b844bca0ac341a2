package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.mamba4j.InvalidConfigException;

class SamplingTest {

    @Test
    void greedyDefaults() {
        Sampling s = Sampling.greedy();
        assertEquals(0.0, s.temperature());
        assertEquals(0, s.topK());
        assertEquals(1.0, s.topP());
        assertEquals(0.0, s.minP());
        assertEquals(1.0, s.repetitionPenalty());
        assertEquals(0L, s.seed());
        assertEquals(128, s.maxNewTokens());
        assertArrayEquals(new int[0], s.stopTokens());
        assertTrue(s.isGreedy());
    }

    @Test
    void ofTemperatureIsSampledWithFiltersOff() {
        Sampling s = Sampling.ofTemperature(0.7);
        assertEquals(0.7, s.temperature());
        assertFalse(s.isGreedy());
        assertEquals(0, s.topK());
        assertEquals(1.0, s.topP());
        assertTrue(Sampling.ofTemperature(0).isGreedy());
    }

    @Test
    void withMethodsReturnNewInstancesAndLeaveTheOriginalAlone() {
        Sampling base = Sampling.ofTemperature(1.0);
        Sampling s = base.topK(40).topP(0.9).minP(0.05).repetitionPenalty(1.1).seed(7).maxNewTokens(32)
                .stopTokens(0, 2).temperature(0.8);
        assertNotSame(base, s);
        assertEquals(1.0, base.temperature());
        assertEquals(0, base.topK());
        assertEquals(128, base.maxNewTokens());

        assertEquals(0.8, s.temperature());
        assertEquals(40, s.topK());
        assertEquals(0.9, s.topP());
        assertEquals(0.05, s.minP());
        assertEquals(1.1, s.repetitionPenalty());
        assertEquals(7L, s.seed());
        assertEquals(32, s.maxNewTokens());
        assertArrayEquals(new int[] {0, 2}, s.stopTokens());
        assertTrue(s.isStopToken(2));
        assertFalse(s.isStopToken(1));
        assertTrue(s.temperature(0).isGreedy());
    }

    @Test
    void stopTokensAreDefensivelyCopiedAndDeduplicated() {
        int[] ids = {5, 3, 5};
        Sampling s = Sampling.greedy().stopTokens(ids);
        ids[0] = 99;
        assertArrayEquals(new int[] {5, 3}, s.stopTokens());
        s.stopTokens()[0] = 42;
        assertArrayEquals(new int[] {5, 3}, s.stopTokens());
        assertArrayEquals(new int[0], s.stopTokens(new int[0]).stopTokens());
    }

    @Test
    void equalsAndHashCodeAreByValue() {
        Sampling a = Sampling.ofTemperature(0.5).topK(3).stopTokens(1, 2);
        Sampling b = Sampling.greedy().stopTokens(1, 2).topK(3).temperature(0.5);
        assertEquals(a, b);
        assertEquals(a.hashCode(), b.hashCode());
        assertNotEquals(a, b.seed(1));
        assertNotEquals(a, b.stopTokens(1));
    }

    @Test
    void toStringIsReadable() {
        assertEquals("Sampling{greedy, maxNewTokens=128, seed=0}", Sampling.greedy().toString());
        String s = Sampling.ofTemperature(0.8).topK(40).topP(0.95).minP(0.1).repetitionPenalty(1.2).seed(9)
                .maxNewTokens(10).stopTokens(0).toString();
        assertEquals(
                "Sampling{temperature=0.8, topK=40, topP=0.95, minP=0.1, repetitionPenalty=1.2, maxNewTokens=10,"
                        + " seed=9, stopTokens=[0]}",
                s);
    }

    @Test
    void temperatureValidation() {
        assertRejected(() -> Sampling.greedy().temperature(-0.1), "temperature", ">= 0");
        assertRejected(() -> Sampling.greedy().temperature(Double.NaN), "temperature", "finite");
        assertRejected(() -> Sampling.greedy().temperature(Double.POSITIVE_INFINITY), "temperature", "finite");
        assertRejected(() -> Sampling.ofTemperature(-1), "temperature", ">= 0");
    }

    @Test
    void topKValidation() {
        assertRejected(() -> Sampling.greedy().topK(-1), "topK", ">= 0");
        assertEquals(0, Sampling.greedy().topK(5).topK(0).topK());
    }

    @Test
    void topPValidation() {
        assertRejected(() -> Sampling.greedy().topP(0.0), "topP", "(0, 1]");
        assertRejected(() -> Sampling.greedy().topP(1.0001), "topP", "(0, 1]");
        assertRejected(() -> Sampling.greedy().topP(Double.NaN), "topP", "(0, 1]");
        assertEquals(1.0, Sampling.greedy().topP(1.0).topP());
        assertEquals(1e-9, Sampling.greedy().topP(1e-9).topP());
    }

    @Test
    void minPValidation() {
        assertRejected(() -> Sampling.greedy().minP(1.0), "minP", "[0, 1)");
        assertRejected(() -> Sampling.greedy().minP(-0.01), "minP", "[0, 1)");
        assertRejected(() -> Sampling.greedy().minP(Double.NaN), "minP", "[0, 1)");
        assertEquals(0.0, Sampling.greedy().minP(0.0).minP());
    }

    @Test
    void repetitionPenaltyValidation() {
        assertRejected(() -> Sampling.greedy().repetitionPenalty(0.0), "repetitionPenalty", "> 0");
        assertRejected(() -> Sampling.greedy().repetitionPenalty(-1.0), "repetitionPenalty", "> 0");
        assertRejected(
                () -> Sampling.greedy().repetitionPenalty(Double.POSITIVE_INFINITY), "repetitionPenalty", "finite");
        assertRejected(() -> Sampling.greedy().repetitionPenalty(Double.NaN), "repetitionPenalty", "> 0");
        assertEquals(0.5, Sampling.greedy().repetitionPenalty(0.5).repetitionPenalty());
    }

    @Test
    void maxNewTokensValidation() {
        assertRejected(() -> Sampling.greedy().maxNewTokens(0), "maxNewTokens", ">= 1");
        assertRejected(() -> Sampling.greedy().maxNewTokens(-5), "maxNewTokens", ">= 1");
        assertEquals(1, Sampling.greedy().maxNewTokens(1).maxNewTokens());
    }

    @Test
    void stopTokensValidation() {
        assertRejected(() -> Sampling.greedy().stopTokens(0, -3), "stopTokens[1]", ">= 0");
        assertRejected(() -> Sampling.greedy().stopTokens((int[]) null), "stopTokens", "null");
    }

    private static void assertRejected(Supplier<Sampling> call, String field, String range) {
        InvalidConfigException e = assertThrows(InvalidConfigException.class, call::get);
        assertTrue(e.getMessage().contains(field), () -> "message should name " + field + ": " + e.getMessage());
        assertTrue(e.getMessage().contains(range), () -> "message should give " + range + ": " + e.getMessage());
    }
}
