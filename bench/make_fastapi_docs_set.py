"""Write eval_sets/fastapi-docs.jsonl: labelled questions for FastAPI 0.110.0's English docs.

    .venv/bin/python bench/docs_set.py                 # the docs, into bench/out/fastapi-docs
    .venv/bin/python bench/make_fastapi_docs_set.py    # checks, then writes the set

Checks, before anything is written:
- answerable questions: each ``doc`` exists under the docs root and its ``evidence`` occurs in
  the page's text with HTML tags removed (the same whole-word, case-insensitive match kbtool's
  question loader uses against the store: ``kbtool.evaluation.questions.contains_evidence``);
- unanswerable questions: every term in ``absent`` occurs in no page at all (case-insensitive
  substring grep over all 136 pages, release notes included). Near misses also name the page
  that comes closest (``near``), which must exist, and say what it gives instead.
Prints the tag counts. Exit status 1 when a check fails (nothing is written then).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from kbtool.evaluation.questions import contains_evidence  # noqa: E402

DOCS = HERE / "out" / "fastapi-docs"
OUT = ROOT / "eval_sets" / "fastapi-docs.jsonl"


def R(doc, evidence, grade=2):
    return {"doc": doc, "evidence": evidence, "grade": grade}


# (question, relevant, tags); unanswerable ones: (question, {"absent": [...], "near": doc, "why": ...}, tags)
Q = [
    # ---------------- exact identifiers: classes, functions, parameters, headers, options ----------------
    ("How do I add an X-Process-Time header to every response?",
     [R("tutorial/middleware.md", "you could add a custom header X-Process-Time containing the time in seconds that it took to process the request")],
     ["exact-id"]),
    ("What do I need to install before I can use TestClient?",
     [R("tutorial/testing.md", "To use TestClient, first install httpx.")], ["exact-id"]),
    ("What is the default max_age of CORSMiddleware?",
     [R("tutorial/cors.md", "Sets a maximum time in seconds for browsers to cache CORS responses. Defaults to 600.")], ["exact-id"]),
    ("Can I combine allow_credentials=True with allow_origins=['*']?",
     [R("tutorial/cors.md", "allow_origins cannot be set to ['*'] for credentials to be allowed, origins must be specified")], ["exact-id"]),
    ("What is the default minimum_size of GZipMiddleware?",
     [R("advanced/middleware.md", "Do not GZip responses that are smaller than this minimum size in bytes. Defaults to 500.")], ["exact-id"]),
    ("What does convert_underscores=False do on a Header parameter?",
     [R("tutorial/header-params.md", "If for some reason you need to disable automatic conversion of underscores to hyphens, set the parameter convert_underscores of Header to False")],
     ["exact-id"]),
    ("When does FastAPI raise RequestValidationError and how do I override its handler?",
     [R("tutorial/handling-errors.md", "When a request contains invalid data, FastAPI internally raises a RequestValidationError.")], ["exact-id"]),
    ("Is ORJSONResponse also available in Starlette?",
     [R("advanced/custom-response.md", "The ORJSONResponse is currently only available in FastAPI, not in Starlette.")], ["exact-id"]),
    ("In which FastAPI version was separate_input_output_schemas added?",
     [R("how-to/separate-openapi-schemas.md", "Support for separate_input_output_schemas was added in FastAPI 0.102.0.")], ["exact-id"]),
    ("Which FastAPI version is needed to document webhooks in OpenAPI?",
     [R("advanced/openapi-webhooks.md", "Webhooks are available in OpenAPI 3.1.0 and above, supported by FastAPI 0.99.0 and above.")], ["exact-id"]),
    ("Why does the SQL tutorial pass connect_args={\"check_same_thread\": False}?",
     [R("tutorial/sql-databases.md", "By default SQLite will only allow one thread to communicate with it")], ["exact-id"]),
    ("What does the @pytest.mark.anyio marker do?",
     [R("advanced/async-tests.md", "tells pytest that this test function should be called asynchronously")], ["exact-id"]),
    ("What is app.dependency_overrides?",
     [R("advanced/testing-dependencies.md", "your FastAPI application has an attribute app.dependency_overrides, it is a simple dict")], ["exact-id"]),
    ("Why use secrets.compare_digest() to check HTTP Basic credentials?",
     [R("advanced/security/http-basic-auth.md", "it will be secure against a type of attacks called \"timing attacks\"")], ["exact-id"]),
    ("What does Uvicorn's --proxy-headers option do?",
     [R("deployment/docker.md", "this will tell Uvicorn to trust the headers sent by that proxy telling it that the application is running behind HTTPS")],
     ["exact-id"]),
    ("What does --worker-class uvicorn.workers.UvicornWorker mean in the Gunicorn command?",
     [R("deployment/server-workers.md", "The Gunicorn-compatible worker class to use in the worker processes.")], ["exact-id"]),
    ("How do I turn off syntaxHighlight in Swagger UI?",
     [R("how-to/configure-swagger-ui.md", "But you can disable it by setting syntaxHighlight to False")], ["exact-id"]),
    ("What is jsonable_encoder() for?",
     [R("tutorial/encoder.md", "you might need to convert a data type (like a Pydantic model) to something compatible with JSON")], ["exact-id"]),
    ("Which algorithm does the OAuth2 JWT tutorial put in ALGORITHM?",
     [R("tutorial/security/oauth2-jwt.md", "Create a variable ALGORITHM with the algorithm used to sign the JWT token and set it to \"HS256\".")], ["exact-id"]),
    ("What is the sub key in a JWT token?",
     [R("tutorial/security/oauth2-jwt.md", "The JWT specification says that there's a key sub, with the subject of the token.")], ["exact-id"]),
    ("What does HTTPSRedirectMiddleware do?",
     [R("advanced/middleware.md", "Enforces that all incoming requests must either be https or wss.")], ["exact-id"]),
    ("What does TrustedHostMiddleware protect against?",
     [R("advanced/middleware.md", "in order to guard against HTTP Host Header attacks")], ["exact-id"]),
    ("Which package must be installed to receive files with UploadFile?",
     [R("tutorial/request-files.md", "To receive uploaded files, first install python-multipart.")], ["exact-id"]),
    ("What does response_model_exclude_unset=True do?",
     [R("tutorial/response-model.md", "You can set the path operation decorator parameter response_model_exclude_unset=True")], ["exact-id"]),
    ("How do I disable the Swagger UI with docs_url?",
     [R("tutorial/metadata.md", "You can disable it by setting docs_url=None.")], ["exact-id"]),
    ("Which package do I install to use BaseSettings with Pydantic v2?",
     [R("advanced/settings.md", "First, install the pydantic-settings package:")], ["exact-id"]),
    ("Which library does the JWT tutorial install to generate and verify tokens?",
     [R("tutorial/security/oauth2-jwt.md", "We need to install python-jose to generate and verify the JWT tokens in Python")], ["exact-id"]),
    ("What does the allowed_hosts argument of TrustedHostMiddleware accept?",
     [R("advanced/middleware.md", "A list of domain names that should be allowed as hostnames.")], ["exact-id"]),
    # ---------------- paraphrases: few words shared with the answering text ----------------
    ("How can my endpoint keep doing work after the reply has already gone out to the caller?",
     [R("tutorial/background-tasks.md", "You can define background tasks to be run after returning a response.")], ["paraphrase"]),
    ("My app sits under a path prefix added by a reverse proxy and the docs page breaks; what fixes that?",
     [R("advanced/behind-a-proxy.md", "In these cases you can use root_path to configure your application.")], ["paraphrase"]),
    ("How do I load a machine learning model once when the server boots and free it when it stops?",
     [R("advanced/events.md", "You can define this startup and shutdown logic using the lifespan parameter of the FastAPI app")], ["paraphrase"]),
    ("How do I let a web page served from another domain call my API from the browser?",
     [R("tutorial/cors.md", "A list of origins that should be permitted to make cross-origin requests.")], ["paraphrase"]),
    ("In my tests, how can I swap a real external service for a fake one?",
     [R("advanced/testing-dependencies.md", "your FastAPI application has an attribute app.dependency_overrides, it is a simple dict")], ["paraphrase"]),
    ("How can I shrink what goes over the wire for clients that accept compressed replies?",
     [R("advanced/middleware.md", "Handles GZip responses for any request that includes \"gzip\" in the Accept-Encoding header.")], ["paraphrase"]),
    ("How do I avoid reading the .env file again on every request?",
     [R("advanced/settings.md", "the Settings object will be created only once, the first time it's called")], ["paraphrase"]),
    ("How do I keep a future upgrade of the framework from silently breaking my service?",
     [R("deployment/versions.md", "The first thing you should do is to \"pin\" the version of FastAPI you are using")], ["paraphrase"]),
    ("Where can I get TLS certificates at no cost, renewed without manual work?",
     [R("deployment/https.md", "It provides HTTPS certificates for free, in an automated way.")], ["paraphrase"]),
    ("Can a URL segment capture a whole file location, slashes included?",
     [R("tutorial/path-params.md", "But you need file_path itself to contain a path, like home/johndoe/myfile.txt.")], ["paraphrase"]),
    ("Can the frontend team get a typed SDK for my endpoints without writing it by hand?",
     [R("advanced/generate-clients.md", "you can generate clients (sometimes called SDKs) for your API, for many different programming languages")], ["paraphrase"]),
    ("Why is checking a submitted password with a plain == comparison risky?",
     [R("advanced/security/http-basic-auth.md", "it will be secure against a type of attacks called \"timing attacks\"")], ["paraphrase"]),
    ("Does hiding the interactive documentation in production make my service safer?",
     [R("how-to/conditional-openapi.md", "That doesn't add any extra security to your API, the path operations will still be available where they are.")], ["paraphrase"]),
    # ---------------- plain lookups ----------------
    ("When should I use Celery instead of FastAPI's background tasks?",
     [R("tutorial/background-tasks.md", "If you need to perform heavy background computation and you don't necessarily need it to be run by the same process")], []),
    ("Do lifespan events run for mounted sub-applications?",
     [R("advanced/events.md", "will only be executed for the main application, not for Sub Applications - Mounts")], []),
    ("How do I make my startup and shutdown handlers run in tests?",
     [R("advanced/testing-events.md", "you can use the TestClient with a with statement")], []),
    ("What does HTTP Basic auth return when the browser sends no credentials?",
     [R("advanced/security/http-basic-auth.md", "If it doesn't receive it, it returns an HTTP 401 \"Unauthorized\" error.")], []),
    ("How long are Let's Encrypt certificates valid?",
     [R("deployment/https.md", "are short-lived (about 3 months)")], []),
    ("Can the detail of an HTTPException be a dict instead of a string?",
     [R("tutorial/handling-errors.md", "you can pass any value that can be converted to JSON as the parameter detail, not only str")], []),
    ("How many times may a dependency yield?",
     [R("tutorial/dependencies/dependencies-with-yield.md", "Make sure to use yield one single time.")], []),
    ("How do I restrict a path parameter to a fixed set of values?",
     [R("tutorial/path-params.md", "Import Enum and create a sub-class that inherits from str and from Enum.")], []),
    ("Which TLS termination proxies can also renew certificates?",
     [R("deployment/https.md", "Traefik (that can also handle certificate renewals)")], []),
    ("Which GraphQL libraries can I use with FastAPI?",
     [R("how-to/graphql.md", "Here are some of the GraphQL libraries that have ASGI support. You could use them with FastAPI")], []),
    ("How do I mount a Flask or Django application inside FastAPI?",
     [R("advanced/wsgi.md", "you can use the WSGIMiddleware and use it to wrap your WSGI application, for example, Flask, Django, etc.")], []),
    ("How do I generate a secret key for signing JWT tokens?",
     [R("tutorial/security/oauth2-jwt.md", "openssl rand -hex 32")], ["code"]),
    ("How do I start Gunicorn with four Uvicorn workers?",
     [R("deployment/server-workers.md", "gunicorn main:app --workers 4 --worker-class uvicorn.workers.UvicornWorker --bind 0.0.0.0:80")], ["code", "exact-id"]),
    ("How is an uploaded file held in memory versus on disk?",
     [R("tutorial/request-files.md", "A file stored in memory up to a maximum size limit, and after passing this limit it will be stored in disk.")], []),
    # ---------------- unanswerable: things the docs never mention ----------------
    ("How do I deploy a FastAPI app to Google Cloud Run?",
     {"absent": ["cloud run", "google cloud"]}, ["unanswerable"]),
    ("How do I schedule periodic jobs with APScheduler inside a FastAPI app?",
     {"absent": ["apscheduler", "periodic"]}, ["unanswerable"]),
    ("How do I add per-client rate limiting with slowapi?",
     {"absent": ["slowapi", "ratelimit", "rate-limit"]}, ["unanswerable"]),
    ("How do I use Beanie ODM documents as request bodies?",
     {"absent": ["beanie"]}, ["unanswerable"]),
    ("How do I serve a gRPC service next to my FastAPI routes?",
     {"absent": ["grpc", "protobuf"]}, ["unanswerable"]),
    ("How do I protect my endpoints with Keycloak?",
     {"absent": ["keycloak"]}, ["unanswerable"]),
    ("How do I load test my FastAPI app with Locust?",
     {"absent": ["locust", "load test"]}, ["unanswerable"]),
    ("How do I send jobs to Dramatiq workers from a path operation?",
     {"absent": ["dramatiq"]}, ["unanswerable"]),
    ("How do I deploy FastAPI on Vercel?",
     {"absent": ["vercel"]}, ["unanswerable"]),
    ("How do I verify Stripe webhook signatures in FastAPI?",
     {"absent": ["stripe"]}, ["unanswerable"]),
    ("How do I translate validation error messages into other languages with i18n?",
     {"absent": ["i18n", "gettext", "babel"]}, ["unanswerable"]),
    ("How do I manage my FastAPI deployment's infrastructure with Terraform?",
     {"absent": ["terraform"]}, ["unanswerable"]),
    # ---------------- unanswerable: near misses (a close page says something else) ----------------
    ("How do I issue refresh tokens alongside the access tokens in the OAuth2 JWT tutorial?",
     {"absent": ["refresh token", "refresh_token"], "near": "tutorial/security/oauth2-jwt.md",
      "why": "access tokens with an expiry only"}, ["unanswerable", "near-miss"]),
    ("How do I rotate the JWT SECRET_KEY without logging every user out?",
     {"absent": ["rotat"], "near": "tutorial/security/oauth2-jwt.md",
      "why": "how to generate SECRET_KEY (openssl rand -hex 32), not how to change it"}, ["unanswerable", "near-miss"]),
    ("How do I set the SameSite attribute on a response cookie?",
     {"absent": ["samesite", "same-site"], "near": "advanced/response-cookies.md",
      "why": "setting cookies through a Response parameter, no cookie attributes"}, ["unanswerable", "near-miss"]),
    ("What is the size in bytes at which UploadFile spills an upload from memory to disk?",
     {"absent": ["max_size", "spool_max", "1 mb", "1mb", "megabyte"], "near": "tutorial/request-files.md",
      "why": "'stored in memory up to a maximum size limit', no number"}, ["unanswerable", "near-miss"]),
    ("How do I retry a background task automatically when it raises an exception?",
     {"absent": ["retry", "retries", "retried"], "near": "tutorial/background-tasks.md",
      "why": "how to add tasks; points to Celery for heavy work; nothing on failures"}, ["unanswerable", "near-miss"]),
    ("How do I set a graceful shutdown timeout so in-flight requests can finish?",
     {"absent": ["graceful", "timeout-graceful"], "near": "advanced/events.md",
      "why": "lifespan shutdown logic, no timeout"}, ["unanswerable", "near-miss"]),
    ("How do I cap the maximum request body size FastAPI accepts?",
     {"absent": ["body size", "max_body", "content-length limit", "request size"], "near": "tutorial/request-files.md",
      "why": "file uploads, no size limit setting"}, ["unanswerable", "near-miss"]),
    ("How do I add pagination with page numbers and next links to a list endpoint?",
     {"absent": ["paginat", "next link", "next_page"], "near": "tutorial/query-params.md",
      "why": "skip/limit query parameters as an example of defaults, no pagination scheme"}, ["unanswerable", "near-miss"]),
    ("How do I limit how many WebSocket connections one client may open at once?",
     {"absent": ["connection limit", "max connections", "max_connections", "too many connections"], "near": "advanced/websockets.md",
      "why": "accepting, receiving and broadcasting, no limits"}, ["unanswerable", "near-miss"]),
    ("How do I add two-factor authentication to the OAuth2 password flow?",
     {"absent": ["two-factor", "two factor", "2-factor", "totp", "one-time password"], "near": "tutorial/security/simple-oauth2.md",
      "why": "username and password form only"}, ["unanswerable", "near-miss"]),
]

TAG_RE = re.compile(r"<[^>]+>")


def main() -> int:
    if not DOCS.is_dir():
        print(f"{DOCS} missing: run bench/docs_set.py first", file=sys.stderr)
        return 1
    pages = {p.relative_to(DOCS).as_posix(): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))}
    visible = {k: TAG_RE.sub("", v) for k, v in pages.items()}
    lower = {k: v.lower() for k, v in pages.items()}
    errors, rows, checks = [], [], []
    for i, (question, rel, tags) in enumerate(Q, 1):
        qid = f"f{i:03d}"
        if isinstance(rel, dict):
            if "unanswerable" not in tags:
                errors.append(f"{qid}: no relevant docs but not tagged unanswerable")
            for term in rel["absent"]:
                hits = [k for k, v in lower.items() if term.lower() in v]
                if hits:
                    errors.append(f"{qid}: {term!r} occurs in {hits[:5]}")
            if rel.get("near") and rel["near"] not in pages:
                errors.append(f"{qid}: near page {rel['near']} missing")
            checks.append((qid, rel))
            rel = []
        else:
            for r in rel:
                if r["doc"] not in pages:
                    errors.append(f"{qid}: missing doc {r['doc']}")
                elif not contains_evidence(visible[r["doc"]], r["evidence"]):
                    errors.append(f"{qid}: evidence not in {r['doc']}: {r['evidence']!r}")
        rows.append({"id": qid, "question": question, "relevant": rel, "tags": tags})
    ids = [r["question"] for r in rows]
    if len(set(ids)) != len(ids):
        errors.append("duplicate questions")
    for e in errors:
        print("ERROR", e)
    if errors:
        return 1
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    counts = Counter(t for r in rows for t in r["tags"])
    n_un = sum(1 for r in rows if not r["relevant"])
    print(f"{len(rows)} questions written to {OUT}: {len(rows) - n_un} answerable, {n_un} unanswerable")
    for tag, n in sorted(counts.items()):
        print(f"  {tag}: {n}")
    print(f"  (untagged: {sum(1 for r in rows if not r['tags'])})")
    print(f"grep checks: {len(checks)} unanswerable questions, "
          f"{sum(len(c['absent']) for _, c in checks)} terms, 0 hits in {len(pages)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
