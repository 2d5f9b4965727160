package k8sauditreceiver

import (
	"net/http"
)

// requireClientName serves only requests whose verified client certificate names one of the
// allowed clients. The TLS handshake already refuses any other (verifyClientName), before a
// byte of a request is read: this is the same check once more, for a request that somehow
// reaches the handler without one (a listener made otherwise), answered 403 and closed without
// reading its body.
func (w *webhook) requireClientName(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.TLS != nil && clientNameAllowed(*req.TLS, allowed) {
			next.ServeHTTP(rw, req)
			return
		}
		rw.Header().Set("Connection", "close")
		w.reject(req.Context(), rw, http.StatusForbidden, reasonClientNotAllowed, "Forbidden",
			"no verified client certificate with a name in allowed_client_names")
	})
}
