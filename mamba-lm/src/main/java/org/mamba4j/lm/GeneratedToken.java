package org.mamba4j.lm;

/**
 * One token of a {@link Generator} request as a stream element: its id and the text it completes (possibly empty,
 * see {@link GenerationListener#onToken}).
 */
public record GeneratedToken(int id, String text) {}
