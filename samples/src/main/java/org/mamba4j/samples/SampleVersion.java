package org.mamba4j.samples;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;
import picocli.CommandLine.IVersionProvider;

/** The samples' --version: the project version the build wrote into {@code version.properties}. */
final class SampleVersion implements IVersionProvider {
    @Override
    public String[] getVersion() {
        try (InputStream in = SampleVersion.class.getResourceAsStream("version.properties")) {
            if (in == null) throw new IllegalStateException("version.properties is missing from the samples' jar");
            Properties p = new Properties();
            p.load(in);
            return new String[] {"mamba4j samples " + p.getProperty("version")};
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
