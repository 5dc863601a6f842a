#!/usr/bin/env bash
# Makes a CA, the extender's serving pair and the scheduler's client pair
# for trying the deployment out, and prints the kubectl commands that store
# them as the Secrets the manifests mount (the namespace must exist first:
# kubectl apply -f deploy/base/namespace.yaml). Needs openssl only. Use
# your own PKI or cert-manager (deploy/options/cert-manager.yaml) in
# production.
#   deploy/gen-certs.sh OUTDIR
set -euo pipefail
out=${1:?usage: gen-certs.sh OUTDIR}
mkdir -p "$out" && cd "$out"
svc=opa-scheduler-extender.opa-scheduler-extender.svc
openssl req -x509 -newkey rsa:3072 -nodes -days 365 -keyout ca.key -out ca.crt -subj "/CN=opa-scheduler-extender-ca"
openssl req -newkey rsa:3072 -nodes -keyout tls.key -out tls.csr -subj "/CN=$svc"
printf "subjectAltName=DNS:%s,DNS:opa-scheduler-extender.opa-scheduler-extender\nextendedKeyUsage=serverAuth\n" "$svc" > server.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -out tls.crt -extfile server.ext
openssl req -newkey rsa:3072 -nodes -keyout scheduler.key -out scheduler.csr -subj "/CN=system:kube-scheduler"
printf "extendedKeyUsage=clientAuth\n" > client.ext
openssl x509 -req -in scheduler.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -out scheduler.crt -extfile client.ext
cat <<MSG
kubectl -n opa-scheduler-extender create secret generic opa-scheduler-extender-tls \\
  --from-file=tls.crt=$PWD/tls.crt --from-file=tls.key=$PWD/tls.key \\
  --from-file=ca.crt=$PWD/ca.crt
kubectl -n opa-scheduler-extender create secret generic opa-scheduler-client-tls \\
  --from-file=ca.crt=$PWD/ca.crt --from-file=tls.crt=$PWD/scheduler.crt --from-file=tls.key=$PWD/scheduler.key
# For deploy/scheduler/kube-scheduler-config.yaml (base64 without line
# breaks; these commands work with GNU and BSD base64 alike):
#   caData:   base64 < $PWD/ca.crt | tr -d '\n'
#   certData: base64 < $PWD/scheduler.crt | tr -d '\n'
#   keyData:  base64 < $PWD/scheduler.key | tr -d '\n'
MSG
