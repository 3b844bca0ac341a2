package org.mamba4j.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.jar.JarFile;
import java.util.stream.Collectors;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.Node;

/**
 * What Maven Central checks, on the artifacts as installed: every published jar has a sources and a Javadoc jar
 * with real content, every POM names itself (name, description) and, through the parent, its url, license, scm
 * and developers; the SBOMs are there; and the user's class path holds the natives but none of our test-only
 * dependencies.
 */
class PublishedArtifactsTest {
    private static final String VERSION = System.getProperty("mamba4j.version");
    private static final Path REPO = Path.of(System.getProperty("mamba4j.localRepository"), "org", "mamba4j");
    private static final List<String> PUBLISHED_JARS = List.of("mamba-presets", "mamba-presets-platform", "mamba-api", "mamba-lm",
            "mamba4j-platform");

    private static Path file(String artifact, String suffix) {
        return REPO.resolve(artifact).resolve(VERSION).resolve(artifact + "-" + VERSION + suffix);
    }

    private static boolean hasEntry(Path jar, String name) throws IOException {
        try (JarFile j = new JarFile(jar.toFile())) {
            return j.getEntry(name) != null;
        }
    }

    @Test
    void everyPublishedJarHasSourcesAndJavadoc() throws IOException {
        for (String a : PUBLISHED_JARS) {
            for (String suffix : List.of(".jar", "-sources.jar", "-javadoc.jar", ".pom"))
                assertTrue(Files.isRegularFile(file(a, suffix)), "installed: " + file(a, suffix));
        }
        assertTrue(Files.isRegularFile(file("mamba-presets", "-linux-x86_64.jar")), "the natives jar");
        assertTrue(hasEntry(file("mamba-api", "-sources.jar"), "org/mamba4j/MambaModel.java"));
        assertTrue(hasEntry(file("mamba-api", "-javadoc.jar"), "org/mamba4j/MambaModel.html"));
        assertTrue(hasEntry(file("mamba-api", "-javadoc.jar"), "index.html"));
        assertTrue(hasEntry(file("mamba-lm", "-sources.jar"), "org/mamba4j/lm/MambaLM.java"));
        assertTrue(hasEntry(file("mamba-lm", "-javadoc.jar"), "org/mamba4j/lm/MambaLM.html"));
        assertTrue(hasEntry(file("mamba-presets", "-sources.jar"), "org/mamba4j/nativ/Model.java"), "generated peers are in the sources jar");
        assertTrue(hasEntry(file("mamba-presets", "-javadoc.jar"), "index.html"));
        assertTrue(hasEntry(file("mamba4j-platform", "-javadoc.jar"), "README.txt"), "aggregates explain themselves");
    }

    @Test
    void everyPomCarriesCentralMetadata() throws Exception {
        Element parent = pom(REPO.resolve("mamba4j-parent").resolve(VERSION).resolve("mamba4j-parent-" + VERSION + ".pom"));
        assertFalse(text(parent, "url").isBlank());
        assertEquals("Apache-2.0", text(child(parent, "licenses"), "name"));
        assertFalse(text(child(parent, "scm"), "connection").isBlank());
        assertFalse(text(child(parent, "developers"), "name").isBlank());
        assertFalse(text(parent, "description").isBlank());
        for (String a : PUBLISHED_JARS) {
            Element p = pom(file(a, ".pom"));
            assertEquals("mamba4j-parent", text(child(p, "parent"), "artifactId"), a + " inherits url, licenses, scm, developers");
            assertFalse(text(p, "name").isBlank(), a + " name");
            assertFalse(text(p, "description").isBlank(), a + " description");
        }
    }

    /**
     * The core needs JavaCPP, OpenBLAS and Jackson only: mamba-api's run-time dependencies are the preset and Jackson,
     * the preset's are JavaCPP and OpenBLAS; the language-model libraries (DJL's tokenizers) come with mamba-lm, and
     * mamba4j-platform brings both.
     */
    @Test
    void theCoreDependsOnJavaCppOpenBlasAndJacksonOnly() throws Exception {
        assertEquals(List.of("org.mamba4j:mamba-presets", "com.fasterxml.jackson.core:jackson-databind"),
                runtimeDependencies("mamba-api"));
        assertEquals(List.of("org.bytedeco:javacpp", "org.bytedeco:openblas"), runtimeDependencies("mamba-presets"));
        assertTrue(runtimeDependencies("mamba-lm").containsAll(List.of("org.mamba4j:mamba-api", "ai.djl.huggingface:tokenizers")),
                "mamba-lm: " + runtimeDependencies("mamba-lm"));
        assertTrue(runtimeDependencies("mamba4j-platform").containsAll(List.of("org.mamba4j:mamba-api", "org.mamba4j:mamba-lm",
                "org.mamba4j:mamba-presets-platform")), "mamba4j-platform: " + runtimeDependencies("mamba4j-platform"));
    }

    /** groupId:artifactId of each dependency of an installed POM that users get (not test, provided or optional). */
    private static List<String> runtimeDependencies(String artifact) throws Exception {
        Element deps = child(pom(file(artifact, ".pom")), "dependencies");
        List<String> out = new java.util.ArrayList<>();
        for (Node n = deps.getFirstChild(); n != null; n = n.getNextSibling()) {
            if (!(n instanceof Element)) continue;
            Element d = (Element) n;
            String scope = optionalText(d, "scope");
            if (scope.equals("test") || scope.equals("provided") || optionalText(d, "optional").equals("true")) continue;
            out.add(text(d, "groupId") + ":" + text(d, "artifactId"));
        }
        return out;
    }

    private static String optionalText(Element e, String name) {
        Node n = e.getElementsByTagName(name).item(0);
        return n == null ? "" : n.getTextContent().strip();
    }

    @Test
    void sbomsAreInstalled() throws IOException {
        for (String a : PUBLISHED_JARS) {
            Path bom = file(a, "-cyclonedx.json");
            assertTrue(Files.isRegularFile(bom), "SBOM " + bom);
            assertTrue(Files.readString(bom).contains("\"bomFormat\" : \"CycloneDX\""), bom.toString());
        }
    }

    @Test
    void classPathHasTheNativesAndNoTestOnlyDependencies() {
        List<String> jars = Arrays.stream(System.getProperty("java.class.path").split(File.pathSeparator))
                .map(p -> Path.of(p).getFileName().toString()).collect(Collectors.toList());
        for (String prefix : List.of("mamba-presets-" + VERSION, "javacpp-", "openblas-"))
            assertTrue(jars.stream().anyMatch(j -> j.startsWith(prefix) && j.endsWith("-linux-x86_64.jar")),
                    prefix + "…-linux-x86_64.jar (natives) on " + jars);
        assertTrue(jars.stream().noneMatch(j -> j.startsWith("cuda-")), "bytedeco cuda is test-only: " + jars);
        assertTrue(jars.stream().noneMatch(j -> j.contains("-linux-arm64") || j.contains("-macosx-") || j.contains("-windows-")),
                "only the platforms we build: " + jars);
    }

    private static Element pom(Path file) throws Exception {
        Document d = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(file.toFile());
        return d.getDocumentElement();
    }

    private static Element child(Element e, String name) {
        for (Node n = e.getFirstChild(); n != null; n = n.getNextSibling())
            if (n instanceof Element && n.getNodeName().equals(name)) return (Element) n;
        throw new AssertionError("<" + name + "> missing in <" + e.getNodeName() + ">");
    }

    /** The text of the first descendant element called {@code name}. */
    private static String text(Element e, String name) {
        Node n = e.getElementsByTagName(name).item(0);
        if (n == null) throw new AssertionError("<" + name + "> missing in <" + e.getNodeName() + ">");
        return n.getTextContent().strip();
    }
}
