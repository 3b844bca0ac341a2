package org.mamba4j.lm;

import java.util.List;

/**
 * Finds stop strings in generated text as it streams in. Text that could still be the start of a stop string is
 * held back, so a client never receives a piece of a stop string that is cut afterwards.
 *
 * <p>Not thread-safe; one per request.
 */
final class StopStrings {
    private final String[] stops;
    private final int longest;
    private final StringBuilder text = new StringBuilder();
    private int released;      // text[0, released) was handed out
    private boolean stopped;

    StopStrings(List<String> stops) {
        this.stops = stops.toArray(new String[0]);
        int max = 0;
        for (String s : this.stops) max = Math.max(max, s.length());
        this.longest = max;
    }

    /** Adds new text; returns what can be released now (possibly empty). After a stop, adds nothing. */
    String push(String piece) {
        if (stopped || piece.isEmpty()) return "";
        int searchFrom = Math.max(0, text.length() - longest + 1);  // a stop may start in the text held back
        text.append(piece);
        int hit = -1;
        for (String s : stops) {
            int at = text.indexOf(s, searchFrom);
            if (at >= 0 && (hit < 0 || at < hit)) hit = at;
        }
        if (hit >= 0) {
            stopped = true;
            text.setLength(hit);
            return release(hit);
        }
        return release(text.length() - heldBack());
    }

    /** Everything not handed out yet (at the end of generation). */
    String flush() {
        return release(text.length());
    }

    boolean stopped() { return stopped; }

    /** The text so far, cut before the stop string when one was found. */
    String text() { return text.toString(); }

    /** Length of the longest tail of the unreleased text that is a proper prefix of some stop string. */
    private int heldBack() {
        int max = Math.min(longest - 1, text.length() - released);
        for (int n = max; n > 0; n--) {
            int from = text.length() - n;
            for (String s : stops)
                if (s.length() > n && startsWith(s, from, n)) return n;
        }
        return 0;
    }

    /** Whether text[from, from + n) equals the first n chars of s. */
    private boolean startsWith(String s, int from, int n) {
        for (int i = 0; i < n; i++) if (text.charAt(from + i) != s.charAt(i)) return false;
        return true;
    }

    private String release(int upTo) {
        String out = text.substring(released, upTo);
        released = upTo;
        return out;
    }
}
