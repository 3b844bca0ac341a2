package org.mamba4j;

import static org.mamba4j.fuzz.FuzzChecks.assertRejectedCheaply;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;
import org.mamba4j.io.SafeTensors;
import org.mamba4j.io.SafeTensorsFile;

/**
 * Small files that claim huge sizes — a header length, a tensor shape, byte offsets, a model configuration (and in
 * mamba-lm's MambaLMTest a padded vocabulary) — are rejected before anything of the claimed size is allocated: each
 * load is measured ({@link org.mamba4j.fuzz.FuzzChecks#assertRejectedCheaply}: heap allocated by this thread, after a
 * warm-up run) and must stay within twice the file's size plus 1 MiB of fixed costs, the bound the fuzz targets check
 * on every input. The readers validate every size against the bytes actually present before allocating, so this holds
 * by construction; these are the cases that would break it.
 */
class HostileSizeClaimsTest {
    @TempDir Path dir;

    private Path raw(String name, long headerLength, String header, int dataBytes) throws Exception {
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(8 + h.length + dataBytes).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(headerLength).put(h);
        Path f = dir.resolve(name);
        Files.write(f, b.array());
        return f;
    }

    private static Executable openAndRead(Path f) {
        return () -> {
            try (SafeTensorsFile s = SafeTensorsFile.open(f)) {
                for (var t : s.tensors()) s.readFloats(t.name());
            }
        };
    }

    @Test
    void headerLengthClaims() throws Exception {
        for (long claim : new long[] {Long.MAX_VALUE, -1, 1L << 40, 100L << 20, 50_000}) {
            Path f = raw("header-" + claim, claim, "{}", 0);
            assertRejectedCheaply(f, openAndRead(f));
        }
    }

    @Test
    void shapeAndOffsetClaims() throws Exception {
        String[] headers = {
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[1073741824],\"data_offsets\":[0,4294967296]}}",
            "{\"w\":{\"dtype\":\"F64\",\"shape\":[536870912],\"data_offsets\":[0,4294967296]}}",
            "{\"w\":{\"dtype\":\"BF16\",\"shape\":[9223372036854775807],\"data_offsets\":[0,2]}}",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551615,8]}}",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
        };
        for (int i = 0; i < headers.length; i++) {
            byte[] h = headers[i].getBytes(StandardCharsets.UTF_8);
            Path f = raw("shape-" + i, h.length, headers[i], 8);
            assertRejectedCheaply(f, openAndRead(f));
            assertRejectedCheaply(f, () -> MambaModel.load(f));
            assertRejectedCheaply(f, () -> OptimizerState.load(f));
            assertRejectedCheaply(f, () -> LinearHead.load(f));
        }
    }

    /** Metadata claiming the largest configuration (65536 wide, 1024 blocks): no model is listed or built. */
    @Test
    void checkpointConfigurationClaims() throws Exception {
        String[] configs = {
            "{\"d_model\":65536,\"d_state\":256,\"d_conv\":8,\"expand\":1,\"dt_rank\":0,\"n_layers\":1024,"
                    + "\"norm_eps\":1e-5,\"dt_min\":0.001,\"dt_max\":0.1,\"dt_init_floor\":1e-4}",
            "{\"d_model\":65536,\"d_state\":256,\"d_conv\":8,\"expand\":1,\"dt_rank\":0,\"n_layers\":1,"
                    + "\"norm_eps\":1e-5,\"dt_min\":0.001,\"dt_max\":0.1,\"dt_init_floor\":1e-4}",
        };
        for (int i = 0; i < configs.length; i++) {
            List<SafeTensors.Entry> few = new ArrayList<>();
            for (int k = 0; k < 12; k++) few.add(new SafeTensors.Entry("t" + k, new long[] {1}, new float[] {1}));
            Path f = dir.resolve("config-" + i);
            SafeTensors.write(f, Map.of("format", "mamba4j", "format_version", "1", "arch", "mamba1", "input_dim", "0",
                    "vocab_size", i == 0 ? "0" : "10000000", "tie_embeddings", "true", "config", configs[i]), few);
            assertRejectedCheaply(f, () -> MambaModel.load(f));
        }
    }
}
