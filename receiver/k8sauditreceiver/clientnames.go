package k8sauditreceiver

import (
	"fmt"
	"io"
	"net/http"
	"slices"
)

// requireClientName serves only requests whose verified client certificate names one of the
// allowed clients. tls.client_ca_file alone makes the TLS handshake require a certificate that
// the CA signed, whichever name it carries: with a cluster CA that is every kubelet and every
// component. The leaf of the verified chain is matched by its common name and its DNS names,
// exactly.
func (w *webhook) requireClientName(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
			// Validate requires client_ca_file with allowed_client_names, so the handshake has
			// verified a chain; answer a request that somehow has none all the same.
			w.reject(req.Context(), rw, http.StatusForbidden, reasonClientNotAllowed, "Forbidden",
				"no verified client certificate: allowed_client_names is set")
			return
		}
		leaf := req.TLS.VerifiedChains[0][0]
		if slices.Contains(allowed, leaf.Subject.CommonName) {
			next.ServeHTTP(rw, req)
			return
		}
		for _, n := range leaf.DNSNames {
			if slices.Contains(allowed, n) {
				next.ServeHTTP(rw, req)
				return
			}
		}
		// Read the body first (within max_request_body_size): answered while it is still being
		// sent, and closed with more of it unread than net/http discards, the connection is
		// reset under the client's write and the 403 never reaches it. The client is one the CA
		// signed, so reading its batch costs no more than serving it would.
		limit := w.maxBody
		if limit <= 0 {
			limit = defaultMaxRequestBodySize
		}
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(rw, req.Body, limit))
		w.reject(req.Context(), rw, http.StatusForbidden, reasonClientNotAllowed, "Forbidden",
			fmt.Sprintf("client certificate CN=%q DNS=%q is not in allowed_client_names", leaf.Subject.CommonName, leaf.DNSNames))
	})
}
