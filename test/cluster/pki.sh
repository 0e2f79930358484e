#!/usr/bin/env bash
# The test node's certificates and kubeconfigs (openssl only): a CA, the API server's serving certificate, one
# client certificate per component and one per node's kubelet (the Node authorizer wants system:node:<name>),
# the service-account key pair. Valid two days; made fresh for every run.
# Usage: pki.sh DIR APISERVER_IP KUBERNETES_SVC_IP NODE_NAME...     (writes kubelet-<NODE_NAME>.kubeconfig each)
set -euo pipefail
dir=$1 ip=$2 svc=$3
shift 3
nodes=("$@")
mkdir -p "$dir" && cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=nodelocaldns-test-ca" 2>/dev/null
sign() { # NAME SUBJECT EXTENSIONS
	openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
	printf '%s\n' "$3" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 -extfile "$1.ext" 2>/dev/null
}
san="DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
sign apiserver "/CN=kube-apiserver" "subjectAltName=$san,IP:127.0.0.1,IP:$ip,IP:$svc
extendedKeyUsage=serverAuth
keyUsage=digitalSignature,keyEncipherment"
client="extendedKeyUsage=clientAuth
keyUsage=digitalSignature,keyEncipherment"
sign admin "/O=system:masters/CN=kubernetes-admin" "$client"
sign kcm "/CN=system:kube-controller-manager" "$client"
sign scheduler "/CN=system:kube-scheduler" "$client"
for node in "${nodes[@]}"; do
	sign "kubelet-$node" "/O=system:nodes/CN=system:node:$node" "$client"
done
sign proxy "/CN=system:kube-proxy" "$client"
sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
kubelets=("${nodes[@]/#/kubelet-}")
for n in admin kcm scheduler proxy "${kubelets[@]}"; do
	cat >"$n.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    certificate-authority: $dir/ca.crt
    server: https://$ip:6443
users:
- name: $n
  user:
    client-certificate: $dir/$n.crt
    client-key: $dir/$n.key
contexts:
- name: node
  context: {cluster: node, user: $n}
current-context: node
KC
done
