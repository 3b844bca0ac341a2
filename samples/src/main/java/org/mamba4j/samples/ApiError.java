package org.mamba4j.samples;

/**
 * An HTTP error of the completion server, answered as OpenAI answers errors:
 * {@code {"error": {"message": ..., "type": ..., "param": ..., "code": null}}} with {@link #status}.
 */
final class ApiError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    final int status;
    final String type;
    final String param;  // the request field at fault, or null

    ApiError(int status, String type, String param, String message) {
        super(message);
        this.status = status;
        this.type = type;
        this.param = param;
    }

    static ApiError badRequest(String param, String message) {
        return new ApiError(400, "invalid_request_error", param, message);
    }
}
