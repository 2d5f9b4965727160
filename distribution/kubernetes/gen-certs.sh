#!/usr/bin/env bash
# gen-certs.sh: the secrets kubetrail.yaml (next to this file) needs, made with openssl only.
#
#   gen-certs.sh --cluster NAME --control-plane-cidr CIDR [--control-plane-cidr CIDR ...]
#                [--server-host HOST] [--namespace kubetrail] [--client-name kube-apiserver-audit]
#                [--extra-server-name NAME ...] [--days 3650] [--out kubetrail-secrets]
#                [--no-network-policy]
#
# It writes into --out:
#   ca.crt, ca.key                 a CA (keep ca.key private: it signs the certificates below)
#   tls.crt, tls.key               the webhook's serving certificate, for the Service's DNS names
#   client.crt, client.key         the kube-apiserver's client certificate, CN --client-name, which
#                                  the manifest's allowed_client_names admits
#   redis-password                 the password of the ID map's Redis
#   secrets.yaml                   the Secrets otelcol-kubetrail-tls (tls.crt, tls.key, ca.crt) and
#                                  redis-auth (password): kubectl apply -f it
#   networkpolicy.yaml             only --control-plane-cidr may reach the webhook port (9880):
#                                  kubectl apply -f it
#   audit-webhook-kubeconfig.yaml  the apiserver's --audit-webhook-config-file, the client
#                                  certificate, its key and the CA embedded: copy it to every
#                                  control-plane node (mode 0600)
#
# --control-plane-cidr: the addresses the kube-apiserver connects from. It runs on the host
# network, so these are the control-plane nodes' IPs or subnet (kubectl get nodes -o wide; with an
# overlay network possibly also the nodes' tunnel addresses). Required, unless --no-network-policy
# (then no NetworkPolicy: the client certificate still authenticates every request).
#
# --server-host: the host the apiserver posts to (default: the Service's DNS name, which resolves
# on the control-plane nodes only if they use cluster DNS). Give the Service's ClusterIP:
#   --server-host "$(kubectl -n kubetrail get service otelcol-kubetrail -o jsonpath='{.spec.clusterIP}')"
# The kubeconfig's tls-server-name keeps the certificate check on the Service's DNS name.
#
# Run again with the same --out, it keeps the CA, the certificates and the password it finds
# there (so the Secrets and the kubeconfig on the nodes stay valid) and rewrites the YAML files:
# a new --server-host or CIDR needs no new certificate. Delete tls.crt (or client.crt) to have
# it signed again, by the same CA, with new names.
set -euo pipefail

cluster=""
namespace=kubetrail
service=otelcol-kubetrail
port=9880
client_name=kube-apiserver-audit
server_host=""
days=3650
out=kubetrail-secrets
network_policy=1
cidrs=()
extra_names=()

usage() {
	sed -n '4,7p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
die() {
	echo "gen-certs.sh: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--cluster) cluster="${2:?}"; shift 2 ;;
	--namespace) namespace="${2:?}"; shift 2 ;;
	--client-name) client_name="${2:?}"; shift 2 ;;
	--server-host) server_host="${2:?}"; shift 2 ;;
	--extra-server-name) extra_names+=("${2:?}"); shift 2 ;;
	--control-plane-cidr) cidrs+=("${2:?}"); shift 2 ;;
	--no-network-policy) network_policy=0; shift ;;
	--days) days="${2:?}"; shift 2 ;;
	--out) out="${2:?}"; shift 2 ;;
	-h | --help) usage ;;
	*) echo "gen-certs.sh: unknown argument $1" >&2; usage ;;
	esac
done

[[ "$cluster" =~ ^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$ ]] ||
	die "--cluster is required: the k8s.cluster.name of the spans (1-63 letters, digits, '.', '_', '-')"
[[ "$days" =~ ^[1-9][0-9]*$ ]] || die "--days: a number of days"
if [ "$network_policy" = 1 ]; then
	[ ${#cidrs[@]} -gt 0 ] || die "--control-plane-cidr is required: the control-plane nodes' addresses, as CIDRs (e.g. 10.0.0.0/24); or --no-network-policy"
	for c in "${cidrs[@]}"; do
		[[ "$c" =~ ^[0-9a-fA-F.:]+/[0-9]{1,3}$ ]] || die "--control-plane-cidr $c: not a CIDR"
	done
fi
command -v openssl >/dev/null || die "openssl is needed"

svc_dns="$service.$namespace.svc"
[ -n "$server_host" ] || server_host="$svc_dns"
case "$server_host" in *:*:*) server_host="[$server_host]" ;; esac # an IPv6 address

umask 077
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

b64() { openssl base64 -A <"$1"; }

# newkey FILE: an ECDSA P-256 private key (PKCS#8).
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# sign NAME CN EXTENSIONS: NAME.crt for the key NAME.key, signed by the CA.
sign() {
	printf '[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = %s\n' "$2" >"$tmp/req.cnf"
	printf '%b\n' "$3" >"$tmp/ext.cnf"
	openssl req -new -key "$out/$1.key" -config "$tmp/req.cnf" -out "$tmp/$1.csr"
	openssl x509 -req -in "$tmp/$1.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$tmp/ext.cnf" \
		-out "$out/$1.crt" 2>/dev/null
}

if [ ! -s "$out/ca.crt" ] || [ ! -s "$out/ca.key" ]; then
	newkey "$out/ca.key"
	printf '[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = ext\n[dn]\nCN = %s\n[ext]\n%s\n' \
		"$service-ca" "basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash" >"$tmp/ca.cnf"
	openssl req -x509 -new -key "$out/ca.key" -config "$tmp/ca.cnf" -days "$days" -out "$out/ca.crt"
	rm -f "$out/tls.crt" "$out/client.crt"
	echo "gen-certs.sh: new CA in $out/ca.crt" >&2
fi

if [ ! -s "$out/tls.crt" ] || [ ! -s "$out/tls.key" ]; then
	sans="DNS:$svc_dns,DNS:$service,DNS:$service.$namespace,DNS:$svc_dns.cluster.local"
	for n in "${extra_names[@]+"${extra_names[@]}"}"; do
		if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then sans="$sans,IP:$n"; else sans="$sans,DNS:$n"; fi
	done
	newkey "$out/tls.key"
	sign tls "$svc_dns" "basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\nsubjectAltName = $sans"
	echo "gen-certs.sh: webhook certificate for $sans in $out/tls.crt" >&2
fi

if [ ! -s "$out/client.crt" ] || [ ! -s "$out/client.key" ]; then
	newkey "$out/client.key"
	sign client "$client_name" "basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = clientAuth"
	echo "gen-certs.sh: the apiserver's client certificate (CN $client_name) in $out/client.crt" >&2
fi
actual_client="$(openssl x509 -in "$out/client.crt" -noout -subject -nameopt multiline | sed -n 's/^ *commonName *= *//p')"
[ "$actual_client" = "$client_name" ] ||
	die "$out/client.crt has CN $actual_client, not --client-name $client_name: delete it to make a new one"

if [ ! -s "$out/redis-password" ]; then
	openssl rand -hex 24 | tr -d '\n' >"$out/redis-password"
fi

cat >"$out/secrets.yaml" <<EOF
# Made by distribution/kubernetes/gen-certs.sh for distribution/kubernetes/kubetrail.yaml.
apiVersion: v1
kind: Secret
metadata:
  name: $service-tls
  namespace: $namespace
type: kubernetes.io/tls
data:
  tls.crt: $(b64 "$out/tls.crt")
  tls.key: $(b64 "$out/tls.key")
  ca.crt: $(b64 "$out/ca.crt")
---
apiVersion: v1
kind: Secret
metadata:
  name: redis-auth
  namespace: $namespace
type: Opaque
data:
  password: $(b64 "$out/redis-password")
EOF

if [ "$network_policy" = 1 ]; then
	{
		cat <<EOF
# Made by distribution/kubernetes/gen-certs.sh: only the control plane reaches the audit webhook.
# Other ingress to the collector pods is refused; the kubelet's probes come from the pod's own
# node, which a NetworkPolicy does not block.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: $service
  namespace: $namespace
spec:
  podSelector:
    matchLabels: {app.kubernetes.io/name: $service}
  policyTypes: [Ingress]
  ingress:
    - ports:
        - {protocol: TCP, port: $port}
      from:
EOF
		for c in "${cidrs[@]}"; do
			echo "        - ipBlock: {cidr: \"$c\"}"
		done
	} >"$out/networkpolicy.yaml"
else
	rm -f "$out/networkpolicy.yaml"
fi

cat >"$out/audit-webhook-kubeconfig.yaml" <<EOF
# The kube-apiserver's --audit-webhook-config-file for kubetrail (made by gen-certs.sh): it holds
# the client key, keep it root-only (mode 0600). The flags to give with it: distribution/apiserver-flags.md.
apiVersion: v1
kind: Config
clusters:
  - name: kubetrail
    cluster:
      server: https://$server_host:$port/audit/$cluster
      tls-server-name: $svc_dns
      certificate-authority-data: $(b64 "$out/ca.crt")
users:
  - name: kube-apiserver
    user:
      client-certificate-data: $(b64 "$out/client.crt")
      client-key-data: $(b64 "$out/client.key")
contexts:
  - name: default
    context: {cluster: kubetrail, user: kube-apiserver}
current-context: default
EOF

apply="kubectl apply -f $out/secrets.yaml"
[ "$network_policy" = 0 ] || apply="$apply -f $out/networkpolicy.yaml"
cat >&2 <<EOF
gen-certs.sh: wrote the manifests and the kubeconfig into $out:
  $apply
then copy $out/audit-webhook-kubeconfig.yaml to /etc/kubernetes/ on every control-plane node
(mode 0600) and give it to the kube-apiserver as --audit-webhook-config-file. Its server is
  https://$server_host:$port/audit/$cluster
EOF
if [ "$server_host" = "$svc_dns" ]; then
	echo "($svc_dns resolves on the control-plane nodes only with cluster DNS: run again with --server-host <the Service's ClusterIP>)" >&2
fi
