package org.mamba4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.mamba4j.Device;
import org.mamba4j.DeviceUnavailableException;
import org.mamba4j.NcclComm;

/** Where NCCL cannot be used (a CPU-only libmamba, no libnccl.so.2), its communicator fails naming what is missing. */
class NcclUnavailableTest {
    @Test
    void ncclNeedsACudaDevice() {
        LaunchConfig launch = new LaunchConfig(0, 1, 0, "127.0.0.1", 29500, Duration.ofSeconds(1));
        DeviceUnavailableException e = assertThrows(DeviceUnavailableException.class,
                () -> NcclCommunicator.connect(launch, Device.cpu()));
        assertTrue(e.getMessage().contains("NCCL needs a CUDA device"), e.getMessage());
        assertThrows(DeviceUnavailableException.class, () -> NcclCommunicator.group(List.of(Device.cpu()), Duration.ofSeconds(1)));
    }

    @Test
    void withoutNcclTheReasonNamesWhatIsMissing() {
        String why = NcclCommunicator.unavailableReason();
        Assumptions.assumeTrue(why != null, "NCCL is usable here");
        assertTrue(why.contains("NCCL needs the CUDA build of libmamba") || why.contains("libnccl.so.2"), why);
        DeviceUnavailableException e = assertThrows(DeviceUnavailableException.class, NcclComm::newUniqueId);
        assertEquals(why, e.getMessage());
    }
}
