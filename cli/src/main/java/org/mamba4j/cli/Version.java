package org.mamba4j.cli;

import picocli.CommandLine.IVersionProvider;

/** Prints the CLI's version (the jar's Implementation-Version when packed, else "dev"). */
final class Version implements IVersionProvider {
    @Override
    public String[] getVersion() {
        String v = MambaCli.class.getPackage().getImplementationVersion();
        return new String[] {"mamba4j " + (v == null ? "dev" : v)};
    }
}
