"""Planted secrets in every form the sanitizer must catch, and benign look-alikes it must keep.

Each planted entry is (form, text, secret): `secret` must not survive sanitizing `text`, in
any file kind. Each benign entry must come out byte for byte. The values are made up; they
only have the shapes of real credentials.
"""

from __future__ import annotations

PLANTED: list[tuple[str, str, str]] = [
    ("export, double quotes", 'export DB_PASSWORD="hunter2-prod"', "hunter2-prod"),
    ("lower-case name", "password=correct-horse-battery", "correct-horse-battery"),
    ("spaced assignment", "aws_secret_access_key = wJalrXUtnFEMIbPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMIbPxRfiCYEXAMPLEKEY"),
    ("export, single quotes", "export OPENAI_API_KEY='plain-value-0001'", "plain-value-0001"),
    ("python dict repr", "{'Authorization': 'Bearer tok-abcdef123456'}", "tok-abcdef123456"),
    ("cli flag, space", "vllm serve m --api-key vllm-key-778899 --port 8000", "vllm-key-778899"),
    ("cli flag, equals", "srun --token=tk-556677889900 true", "tk-556677889900"),
    ("yaml api-key", "api-key: yaml-secret-4455", "yaml-secret-4455"),
    ("x-auth-token header", "X-Auth-Token: hdr-secret-3344", "hdr-secret-3344"),
    ("url userinfo", "git clone https://deploy:p4ssw0rd-x@git.example.org/r.git", "p4ssw0rd-x"),
    ("query api_key", "GET /v1/models?api_key=q-secret-9911&page=2", "q-secret-9911"),
    ("query token", "https://h.example/cb?token=q-token-2288", "q-token-2288"),
    ("query sig", "https://acct.blob.example/c/b?sv=2021&sig=SaSsIgNaTuRe%2Bx%3D", "SaSsIgNaTuRe%2Bx%3D"),
    ("curl -u", "curl -u admin:curlpass77 https://h.example", "curlpass77"),
    (
        "azure AccountKey",
        "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=QWNjb3VudEtleQ==;",
        "QWNjb3VudEtleQ==",
    ),
    ("bare bearer", "sent Bearer abcDEF1234567890", "abcDEF1234567890"),
    ("slack", "xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"),
    ("google", "key AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ("stripe", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("gitlab", "glpat-xxxxxxxxxxxxxxxxxxxx1234", "glpat-xxxxxxxxxxxxxxxxxxxx1234"),
    ("openai", "sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstuvwx"),
    ("ngc", "nvapi-abcdefghijklmnopqrstuv", "nvapi-abcdefghijklmnopqrstuv"),
    ("huggingface", "hf_abcdefghijklmnopqrstuvwxyz", "hf_abcdefghijklmnopqrstuvwxyz"),
    ("aws access key", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("github", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlMTIz", "c2lnbmF0dXJlMTIz"),
    (
        "pypi",
        "pypi-AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTEyMzQtMTIzNC0xMjM0LTEyMzQ1Njc4OTAxMgACJXsicGVy",
        "AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTEyMzQtMTIzNC0xMjM0LTEyMzQ1Njc4OTAxMgACJXsicGVy",
    ),
    (
        "sendgrid",
        "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",
        "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    ),
    ("twilio", "AC0123456789abcdef0123456789abcdef", "AC0123456789abcdef0123456789abcdef"),
    (
        "pem, whole",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAwholekey000000000\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAwholekey000000000",
    ),
    (
        "pem, END half only",
        "tail of a log\nMIIEowIBAAKCAQEAendhalf000000000\nZZZZendhalfline2ZZZZZZ\n-----END PRIVATE KEY-----\nafter",
        "MIIEowIBAAKCAQEAendhalf000000000",
    ),
    (
        "pem, BEGIN half only",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAbeginhalf\n",
        "b3BlbnNzaC1rZXktdjEAAAAbeginhalf",
    ),
    (
        "pgp private block",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGpgpsecretline0000\n-----END PGP PRIVATE KEY BLOCK-----",
        "lQOYBGpgpsecretline0000",
    ),
    ("json-escaped in a log line", 'cmd="{\\"DB_PASSWORD\\": \\"esc-secret-11\\"}"', "esc-secret-11"),
    ("cookie header", "Cookie: session=ck-secret-5566", "ck-secret-5566"),
    ("npm authToken", "//registry.npmjs.org/:_authToken=npm-tok-123456", "npm-tok-123456"),
    ("passphrase", "GPG_PASSPHRASE: phr-secret-1", "phr-secret-1"),
    ("private ip", "peer 10.12.34.56 answered", "10.12.34.56"),
    ("cgnat ip", "tailscale 100.101.102.103", "100.101.102.103"),
    ("link-local ip", "metadata 169.254.169.254", "169.254.169.254"),
    ("ipv6 ula", "bound to fd12:3456:789a::1", "fd12:3456:789a::1"),
    ("ipv6 link-local", "fe80::1ff:fe23:4567:890a%eth0", "fe80::1ff:fe23:4567:890a"),
    ("cloud host name", "ip-10-0-12-34.ec2.internal", "ip-10-0-12-34"),
    ("internal domain", "db.prod.corp.internal resolved", "db.prod.corp.internal"),
]

# Host details of the run the tests pretend to be (see `run_sanitizer`).
RUN_USER, RUN_HOST, RUN_DOMAIN = "alicejones", "gpu-node-17", "cluster.example.edu"
HOST_PLANTED: list[tuple[str, str, str]] = [
    ("user name", f"owner {RUN_USER} started it", RUN_USER),
    ("home path", f"/home/{RUN_USER}/venv/bin/python", f"/home/{RUN_USER}"),
    ("data path", f"/data/{RUN_USER}/models/m", RUN_USER),
    ("scratch path", f"/scratch/{RUN_USER}/run", RUN_USER),
    ("host name, upper case", f"on {RUN_HOST.upper()} now", RUN_HOST.upper()),
    ("short host name", f"node {RUN_HOST}:", RUN_HOST),
    ("fqdn", f"{RUN_HOST}.{RUN_DOMAIN}", RUN_DOMAIN),
    ("domain alone", f"search {RUN_DOMAIN}", RUN_DOMAIN),
]

BENIGN: list[str] = [
    "MAX_TOKENS=4096",
    "MAX_NUM_BATCHED_TOKENS=8192",
    "VLLM_MAX_NUM_SEQS=256 max_tokens=16",
    "KEYBOARD=us",
    "proxy-read-timeout: 60s",
    "image ubuntu:24.04 and debian:bookworm",
    "TOKENIZERS_PARALLELISM=false tokenizer=fast",
    "token_type=Bearer",
    "Bearer authentication is required",
    "AUTH_URL=https://auth.example.org/oauth",
    "KEY_FILE=/run/secrets/key.pem",
    "password_file: /etc/dd/pass",
    "num_tokens: 128, prompt_tokens: 12",
    "public 8.8.8.8 and 192.0.2.10 and 172.32.0.1",
    "version 10.0.12 released",
    '{"kind": "request", "status": 429, "retry_after": 3, "ttft_s": 0.012}',
    "slurm_proxy_request backend=http://node1:8000 status=200 outcome=ok",
    "scancel --signal=TERM 12.3",
    "--max-tokens 4 --seed 0 --records 32",
    "the token budget was exceeded",
    "Retry-After: 3",
    "sha256 5410c6bca7c035c4cb215cc0319071e00acab3f124a8ebb9a44d24daaa4d4520",
    "fdisk /dev/sda1 and feature: on",
    "drain.sut_cleanup.cancel: exit 0 after 2.9s",
]
