package org.mamba4j.lm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class StopStringsTest {
    @Test
    void holdsBackAPossibleStartAndCutsAtTheStop() {
        StopStrings s = new StopStrings(List.of("o w", "xyz"));
        assertEquals("hell", s.push("hello"));   // "o" may start "o w"
        assertEquals("", s.push(" "));           // "o " still may
        assertEquals("", s.push("wor"));         // found: cut before it
        assertTrue(s.stopped());
        assertEquals("hell", s.text());
        assertEquals("", s.push("more"));
        assertEquals("", s.flush());
    }

    @Test
    void releasesHeldTextWhenItCannotStartAStop() {
        StopStrings s = new StopStrings(List.of("abc"));
        assertEquals("x", s.push("xab"));
        assertEquals("abd", s.push("d"));
        assertEquals("", s.push("a"));
        assertFalse(s.stopped());
        assertEquals("a", s.flush());
        assertEquals("xabda", s.text());
    }

    @Test
    void theEarliestStopWinsAcrossPieces() {
        StopStrings s = new StopStrings(List.of("cd", "bcdx"));
        assertEquals("a", s.push("ab"));
        assertEquals("", s.push("cdx"));        // "bcdx" starts before "cd"
        assertEquals("a", s.text());
    }
}
