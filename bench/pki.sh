# pki.sh: sourced by the bench scripts whose pods talk mutual TLS
# (clone.sh, upload.sh).

# bench_pki DIR CLIENT_CN: a CA (DIR/ca.crt), the upload server's
# certificate for 127.0.0.1 (DIR/server.{crt,key}) and a client's named
# CLIENT_CN (DIR/client.{crt,key}, as CDI's cloner or upload proxy);
# openssl's chatter goes to DIR/openssl.log.
bench_pki() {
	local dir=$1 client_cn=$2 who cn ext
	mkdir -p "$dir"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/ca.key" -out "$dir/ca.crt" -days 1 -subj /CN=bench-ca 2>>"$dir/openssl.log"
	for who in server client; do
		cn=upload-server ext="subjectAltName=IP:127.0.0.1"
		[[ $who == client ]] && cn=$client_cn ext="extendedKeyUsage=clientAuth"
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/$who.key" -out "$dir/$who.csr" -subj "/CN=$cn" 2>>"$dir/openssl.log"
		openssl x509 -req -in "$dir/$who.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -out "$dir/$who.crt" -days 1 -extfile <(echo "$ext") 2>>"$dir/openssl.log"
	done
}
