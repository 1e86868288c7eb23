#!/bin/sh
# A lab CA for termlink with openssl: the CA, the server's certificate
# (for 127.0.0.1 and localhost) and two devices' client certificates
# (URI SAN termlink:peer/<peer_id>). Run it in an empty directory; keep
# ca-key.pem off the server. TestOpenSSLLabCA runs this very script.
set -eu
ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"

# 1. The CA: key and self-signed certificate, 10 years.
openssl req -x509 $ec -keyout ca-key.pem -out ca.pem -days 3650 \
  -subj "/CN=termlink lab CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

# 2. The server: key and CSR, then the certificate with the names devices
#    dial (every IP and DNS name in --server URLs).
openssl req -new $ec -keyout server-key.pem -out server.csr -subj "/CN=termserver"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 825 \
  -extfile server.ext -out server.pem

# 3. Each device: key and CSR, then a client certificate naming its peer_id.
for peer in kiosk-1 kiosk-2; do
  openssl req -new $ec -keyout "$peer-key.pem" -out "$peer.csr" -subj "/CN=$peer"
  printf 'subjectAltName=URI:termlink:peer/%s\nextendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' "$peer" > "$peer.ext"
  openssl x509 -req -in "$peer.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 825 \
    -extfile "$peer.ext" -out "$peer.pem"
done
chmod 600 ./*-key.pem
