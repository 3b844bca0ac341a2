package org.mamba4j.cli;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;
import picocli.CommandLine.IVersionProvider;

/** The CLI's version: the project version the build wrote into {@code version.properties} (Maven resource filtering). */
final class Version implements IVersionProvider {
    /** The project version, e.g. {@code 0.1.0-SNAPSHOT}. */
    static String project() {
        try (InputStream in = Version.class.getResourceAsStream("version.properties")) {
            if (in == null) throw new IllegalStateException("version.properties is missing from the CLI's jar");
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public String[] getVersion() {
        return new String[] {"mamba4j " + project(), "Java " + Runtime.version() + " (" + System.getProperty("java.vm.name") + ")"};
    }
}
