package org.mamba4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The safety net of {@link NativeGuard}: objects dropped without {@code close()} are freed once a garbage
 * collection finds them unreachable (observed through their guards, which the test keeps, and the guard's
 * counters), closed objects are not freed twice, and a model closed before its trainer keeps its peer until the
 * trainer is closed — whichever way the two are released.
 */
class CleanerSafetyNetTest {
    private static final int ROUNDS = 20;

    private static MambaModel model() {
        return MambaModel.builder(Mamba1Config.builder().dModel(8).dState(2).layers(1).build()).inputDim(2).seed(1).build();
    }

    /** Makes a model, a state, a trainer and a tensor, uses them, and returns only their guards. */
    private static List<NativeGuard> dropFour() {
        MambaModel m = model();
        MambaState s = m.newState(1);
        Trainer t = Trainer.builder(m).build();
        Tensor x = Tensor.of(Device.cpu(), new float[] {1, 2}, 1, 2);
        m.step(s, x.toArray());
        t.stepMse(new float[2], new float[8]);
        return List.of(m.guard(), s.guard(), t.guard(), x.guard());
    }

    @Test
    void droppedObjectsAreFreedAfterAGarbageCollection() throws InterruptedException {
        long collected0 = NativeGuard.collectedCount();
        List<NativeGuard> guards = new ArrayList<>();
        for (int i = 0; i < ROUNDS; i++) guards.addAll(dropFour());
        assertTrue(guards.stream().noneMatch(NativeGuard::isReleased), "nothing is freed while reachable");
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (!guards.stream().allMatch(NativeGuard::isReleased) && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        long freed = guards.stream().filter(NativeGuard::isReleased).count();
        assertEquals(guards.size(), freed, "dropped objects freed by the Cleaner");
        assertTrue(guards.stream().allMatch(NativeGuard::isClosed));
        assertTrue(NativeGuard.collectedCount() - collected0 >= guards.size(), "counted as collected, not closed");
    }

    @Test
    void closedObjectsAreFreedOnceAndNotCollected() throws InterruptedException {
        List<NativeGuard> guards = new ArrayList<>();
        long released0 = NativeGuard.releasedCount();
        for (int i = 0; i < ROUNDS; i++) {
            try (MambaModel m = model(); MambaState s = m.newState(1); Trainer t = Trainer.builder(m).build();
                 Tensor x = Tensor.allocate(Device.cpu(), DType.F32, 2)) {
                guards.addAll(List.of(m.guard(), s.guard(), t.guard(), x.guard()));
            }
        }
        assertTrue(guards.stream().allMatch(NativeGuard::isReleased));
        assertTrue(NativeGuard.releasedCount() - released0 >= guards.size());
        for (int i = 0; i < 5; i++) {  // the Cleaner must find nothing left to do for them (it would throw on a double free)
            System.gc();
            Thread.sleep(20);
        }
        assertTrue(guards.stream().allMatch(NativeGuard::isReleased));
    }

    /** libmamba's trainer uses its model until it is destroyed: closing the model first defers its free. */
    @Test
    void aModelClosedBeforeItsTrainerIsFreedAfterIt() {
        MambaModel m = model();
        Trainer t = Trainer.builder(m).build();
        m.close();
        assertTrue(m.isClosed());
        assertFalse(m.guard().isReleased(), "the trainer still holds the model's peer");
        t.close();
        assertTrue(t.guard().isReleased());
        assertTrue(m.guard().isReleased(), "the last trainer's close frees the model");
    }

    @Test
    void aModelWithTwoTrainersWaitsForBoth() {
        MambaModel m = model();
        Trainer a = Trainer.builder(m).build(), b = Trainer.builder(m).build();
        a.close();
        m.close();
        assertFalse(m.guard().isReleased());
        b.close();
        assertTrue(m.guard().isReleased());
    }
}
