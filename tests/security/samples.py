"""Credential-shaped test strings, assembled at runtime.

None of these are real credentials; they are built from pieces so that secret scanners
running over the repository do not flag the test sources.
"""

from __future__ import annotations

OPENAI_KEY = "sk-" + "T3stOnlyNotARealKey0123456789abcdefghij"
OPENAI_PROJECT_KEY = "sk-" + "proj-" + "T3st_Only-NotReal0123456789abcdefghijKLMN"
ANTHROPIC_KEY = "sk-" + "ant-" + "api03-T3stOnlyNotReal0123456789abcdefghijkl"
GITHUB_TOKENS = [
    prefix + "T3stOnlyNotReal0123456789abcdefghijk"
    for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
]
GITHUB_PAT = "github" + "_pat_" + "11T3STONLY0123456789_abcdefghijklmnopqrstuvwxyz"
SLACK_TOKENS = [
    "xox" + kind + "-123456789012-1234567890123-T3stOnlyNotRealAbCdEf" for kind in "abprs"
]
AWS_KEY = "AKIA" + "T3STONLYNOTREAL0".upper()
JWT = (
    "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IlRlc3QifQ"
    ".c2lnbmF0dXJlLW5vdC1yZWFsLTAxMjM0NTY3ODk"
)
BEARER = "T3stOnly0123456789abcdef.ghijklmnop"
BASIC = "dXNlcjpodW50ZXIy"  # base64("user:hunter2")
PEM = (
    "-----BEGIN " + "RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAT3stOnlyNotRealKeyMaterial0123456789abcdef\n"
    "token: this-line-is-inside-the-block\n"
    "-----END RSA PRIVATE KEY-----"
)
VISA_TEST_CARD = "4111 1111 1111 1111"  # the well-known Luhn-valid test number
ORDER_NUMBER = "1234567812345678"  # 16 digits, fails Luhn
