#!/usr/bin/env python3
"""s3put.py ENDPOINT ACCESS SECRET BUCKET KEY FILE: makes BUCKET (if it is
not there) and puts FILE at KEY on an S3 server, signed with AWS Signature
Version 4 (region us-east-1): the e2e's way to fill MinIO without a client."""
import datetime, hashlib, hmac, sys, urllib.error, urllib.parse, urllib.request

endpoint, access, secret, bucket, key, path = sys.argv[1:7]
region, service = "us-east-1", "s3"


def sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def put(path_part, body):
    url = urllib.parse.urlsplit(endpoint)
    now = datetime.datetime.now(datetime.timezone.utc)
    amzdate, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    canonical_path = urllib.parse.quote(path_part, safe="/-_.~")
    headers = {"host": url.netloc, "x-amz-content-sha256": payload, "x-amz-date": amzdate}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["PUT", canonical_path, "", "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, payload])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = sign(sign(sign(sign(("AWS4" + secret).encode(), day), region), service), "aws4_request")
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, Signature={signature}"
    req = urllib.request.Request(endpoint + canonical_path, data=body, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, b""
    except urllib.error.HTTPError as e:
        return e.code, e.read()


status, answer = put("/" + bucket, b"")
if status != 200 and b"BucketAlreadyOwnedByYou" not in answer:
    sys.exit(f"s3put.py: making bucket {bucket}: {status} {answer.decode(errors='replace')}")
with open(path, "rb") as f:
    status, answer = put(f"/{bucket}/{key}", f.read())
if status != 200:
    sys.exit(f"s3put.py: putting {key}: {status} {answer.decode(errors='replace')}")
