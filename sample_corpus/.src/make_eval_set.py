"""Write eval_sets/sample.jsonl and check every evidence fragment against the corpus.

Run:  python sample_corpus/.src/make_eval_set.py
Checks: each `doc` exists; each evidence is found verbatim in the visible text of the doc
(Markdown syntax stripped, HTML tags stripped, DOCX paragraphs/cells, PDF per extracted line,
TXT/CSV per line); prints tag counts.
"""
import html, json, re, sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent
OUT = CORPUS.parent / "eval_sets" / "sample.jsonl"

TS, INS, AG, API, DOCX, CSV, ORD, PDF, ESC, ZH, PERM, RES = (
    "manual/troubleshooting.md", "manual/install.md", "manual/agent-behaviour.md",
    "api/reference.html", "policies/refund-policy.docx", "billing/plans.csv",
    "billing/orders.md", "release-notes.pdf", "support/escalation.txt", "zh/faq.md",
    "security/permissions.md", "policies/data-residency.md")
LF, SM, MT = "manual/large-files.md", "manual/server-move.md", "support/maintenance.md"
ZINS, ZTS, ZBILL, ZSEC = "zh/install.md", "zh/troubleshooting.md", "zh/billing.md", "zh/security.md"


def R(doc, evidence, grade=2):
    return {"doc": doc, "evidence": evidence, "grade": grade}


Q = [
    # ---------------- exact identifiers ----------------
    ("What causes error TW-E5120 and how do I fix it?",
     [R(TS, "the self-hosted server cannot read from or write to its block storage")], ["exact-id"]),
    ("How do I fix error TW-E1042?",
     [R(TS, "click Sign in again in the status window"),
      R(API, "Using an expired token returns HTTP 401 with error code TW-E1042.", 1)], ["exact-id", "multi-doc"]),
    ("What does error code TW-E3310 mean?",
     [R(TS, "such as a trailing dot or a colon")], ["exact-id", "table"]),
    ("What is the status of order TWS-2025-000219?",
     [R(ORD, "Order TWS-2025-000219 is waiting for a bank transfer.")], ["exact-id"]),
    ("What does GET /v2/sync-jobs/{job_id} return?",
     [R(API, "Returns the state of a server-side job.")], ["exact-id"]),
    ("What is the default value of sync.timeout_ms?",
     [R(INS, "How long a single request to the server may take")], ["exact-id", "table"]),
    ("What does tw_client.rotate_token() do?",
     [R(API, "replaces the token held by the session"),
      R(PDF, "tw_client.refresh() is deprecated; use tw_client.rotate_token() instead.", 1)], ["exact-id"]),
    ("In which release was API v1 removed?",
     [R(PDF, "API v1 was removed in 3.4.0"),
      R(API, "Version 1 of the API is no longer available.", 1)], ["exact-id", "multi-doc"]),
    ("What was fixed in release 3.4.1?",
     [R(PDF, "A false TW-E2203 error after waking from sleep on macOS 12.")], ["exact-id"]),
    ("What is security advisory TW-SA-2024-07 about?",
     [R(PDF, "revoked share links could stay cached for up to 1 hour")], ["exact-id"]),
    ("How is the X-TW-Signature header computed for webhooks?",
     [R(API, "Each delivery is signed with HMAC-SHA256"),
      R(PDF, "Webhook deliveries are signed with HMAC-SHA256 in the X-TW-Signature header.", 1)],
     ["exact-id", "multi-doc"]),
    ("What do the parts of an invoice number like INV-2024-11-0932 mean?",
     [R(ORD, "prefix, year, month, sequence within the month")], ["exact-id"]),
    ("What does bandwidth.upload_kbps = 0 mean?",
     [R(INS, "Upload ceiling in kilobits per second; 0 means unlimited"),
      R(AG, "The agent then never exceeds the ceiling you set", 1)], ["exact-id", "table", "multi-doc"]),
    ("What does TW-E7001 mean?",
     [R(TS, "The file is larger than the server upload limit"),
      R(API, "The upload exceeds the server upload limit", 1)], ["exact-id", "table"]),
    ("How do I recover from TW-E2203, local index corrupted?",
     [R(TS, "quit the agent and rebuild the index")], ["exact-id", "code"]),
    ("What is the default of sync.keepalive_s?",
     [R(INS, "Keep-alive window in seconds; see the agent behaviour guide"),
      R(AG, "The window is 90 seconds unless sync.keepalive_s says otherwise.")],
     ["exact-id", "table", "multi-doc"]),
    ("When does release 3.4 reach end of support?",
     [R(PDF, "Release 3.4 reaches end of support on 2025-10-21.")], ["exact-id"]),
    ("Can a self-hosted server be upgraded directly from 3.1 to 3.5.0?",
     [R(PDF, "Servers older than 3.2.0 must first be upgraded to 3.2.0")], ["exact-id"]),
    ("What does the TWC prefix on an order number mean?",
     [R(ORD, "Orders placed through the partner in Mainland China use the prefix"),
      R(DOCX, "their order numbers start with TWC", 1)], ["exact-id", "multi-doc"]),
    ("How do I revoke a share link with DELETE /v2/shares/{share_id}?",
     [R(API, "Revokes a share link immediately."),
      R(PDF, "New endpoint DELETE /v2/shares/{share_id} revokes a share link.", 1)], ["exact-id"]),
    ("What does order status partially_refunded mean?",
     [R(ORD, "Part of the amount was returned, for example for unused seats.")], ["exact-id", "table"]),
    ("What was the default of sync.chunk_size_kb before release 3.3.0?",
     [R(PDF, "The default of sync.chunk_size_kb was raised from 1024 to 4096.")], ["exact-id", "temporal"]),
    # ---------------- code blocks ----------------
    ("What command creates a support bundle with the logs?",
     [R(TS, "To create a support bundle containing the logs")], ["code"]),
    ("How do I install the desktop agent on Ubuntu with apt?",
     [R(INS, "sudo apt update && sudo apt install tidewater-agent")], ["code"]),
    ("Which port does the self-hosted server container listen on?",
     [R(INS, "docker run -d --name tidewater-server")], ["code"]),
    ("Show an example agent.yaml for an office network that uses an NTLM proxy.",
     [R(INS, "for an office network behind a proxy looks like this")], ["code"]),
    ("How do I install the agent silently on managed Windows machines?",
     [R(INS, "pass the workspace and disable the wizard")], ["code"]),
    ("How do I wait for a server-side move job to finish with the Python client?",
     [R(API, "every 2 seconds until the job succeeds or fails")], ["code"]),
    ("What goes into server.yaml to store file blocks in an S3 bucket?",
     [R(INS, "names the database, the block storage and the public address")], ["code"]),
    ("How can I test the block storage of a self-hosted server from the command line?",
     [R(TS, "writes, reads and deletes a 1 MB test object")], ["code"]),
    ("What does a paginated API response look like?",
     [R(API, "Each page includes a next_cursor field.")], ["code"]),
    # ---------------- tables ----------------
    ("How much does the Business plan cost per month?",
     [R(CSV, "Business,59,5000,50,3000,Priority,yes")], ["table"]),
    ("How many API requests per minute does the Team plan allow?",
     [R(CSV, "Team,24,1000,10,1200,Standard,no"),
      R(API, "Limits are counted per workspace, not per token")], ["table", "multi-doc"]),
    ("Which plans include single sign-on?",
     [R(CSV, "plan,monthly_price_usd,storage_gb,seats_included,api_requests_per_minute,support_tier,sso"),
      R(PERM, "Single sign-on is available on the plans marked with SSO", 1)], ["table", "multi-doc"]),
    ("What is the first response time for a Sev1 ticket on the Premier tier?",
     [R(ESC, "First response means a reply from a support engineer")], ["table"]),
    ("Which permission tags does the Editor role have?",
     [R(PERM, "Regular members who create and change files")], ["table"]),
    ("Where is the primary data centre for APAC workspaces?",
     [R(RES, "Customers in Asia-Pacific outside Mainland China")], ["table"]),
    ("How much storage does the Nonprofit plan include?",
     [R(CSV, "Nonprofit,12,2000,25,1200,Standard,no")], ["table"]),
    ("How many concurrent sync jobs can a Business workspace run?",
     [R(API, "The burst column is the number of requests allowed")], ["table"]),
    ("What refund window applies in each region now, in summary?",
     [R(DOCX, "7 days, then unused seats only")], ["table", "temporal"]),
    # ---------------- paraphrase (no shared content words with the answer) ----------------
    ("What happens if my laptop drops off the Wi-Fi?",
     [R(AG, "it switches to offline mode and queues changes locally")], ["paraphrase"]),
    ("A coworker and I edited the same spreadsheet simultaneously; whose work survives?",
     [R(AG, "the first upload wins and the second is kept beside it")], ["paraphrase"]),
    ("Can I stop the app from hogging my internet?",
     [R(AG, "An upload ceiling and a download ceiling can be set")], ["paraphrase"]),
    ("If I deselect a directory to free up disk space, do my teammates lose it too?",
     [R(AG, "are removed from this computer but remain in the cloud")], ["paraphrase"]),
    ("How can I prevent scratch junk from ever leaving my PC?",
     [R(AG, "Names matching a pattern in a .twignore file are skipped")], ["paraphrase"]),
    ("Will running it kill my notebook's charge when I'm away from an outlet?",
     [R(AG, "On battery power the agent postpones checksum calculation")], ["paraphrase"]),
    ("I accidentally erased something last week. Is it gone for good?",
     [R(AG, "Removed items stay in the Recycle area for 30 days")], ["paraphrase"]),
    ("Is it possible to return a spreadsheet to the way it looked a month ago?",
     [R(AG, "The server keeps every earlier revision of a file for 90 days")], ["paraphrase"]),
    ("Nobody from the helpdesk has gotten back to me for ages. How do I push this up the chain?",
     [R(ESC, "reply to the ticket with the word ESCALATE")], ["paraphrase"]),
    ("I subscribed while living in Germany three weeks ago. Can I still get reimbursed?",
     [R(DOCX, "the withdrawal period is 30 days from purchase")], ["paraphrase", "temporal"]),
    ("How frequently may my integration call your endpoints without being throttled?",
     [R(API, "Limits are counted per workspace, not per token"),
      R(CSV, "plan,monthly_price_usd,storage_gb,seats_included,api_requests_per_minute,support_tier,sso", 1)],
     ["paraphrase", "table", "multi-doc"]),
    ("Can an external freelancer look at one project directory without us buying another license?",
     [R(PERM, "Guests do not take up a seat")], ["paraphrase"]),
    ("Can I temporarily halt uploading during a video call?",
     [R(AG, "Pausing from the tray icon holds all transfers")], ["paraphrase"]),
    ("Will it burn through my phone's data allowance when tethering?",
     [R(AG, "only files smaller than 10 MB are transferred")], ["paraphrase"]),
    ("Once we shut down our team space, how long until nothing of it remains on your machines?",
     [R(RES, "every trace of the workspace is gone at most 95 days after closing")], ["paraphrase"]),
    ("In what city does our stuff physically sit if we're a French firm?",
     [R(RES, "Frankfurt, Germany")], ["paraphrase", "table"]),
    # ---------------- multi-document ----------------
    ("What happens when the workspace runs out of storage, and how can a script check usage?",
     [R(TS, "the workspace has used all the storage included in its plan"),
      R(API, "Useful for alerting before uploads are blocked by the storage quota.")], ["multi-doc"]),
    ("Which support tier comes with the Business plan, and how fast is a Sev1 answered there?",
     [R(CSV, "Business,59,5000,50,3000,Priority,yes"),
      R(ESC, "First response means a reply from a support engineer")], ["multi-doc", "table"]),
    ("How do I fix a certificate error behind a corporate proxy that inspects TLS?",
     [R(TS, "install the proxy's root certificate in the operating system trust store"),
      R(INS, "Proxies that inspect TLS traffic must have their root certificate installed"),
      R(ZH, "很多公司代理会拦截并替换 TLS 证书", 1)], ["multi-doc"]),
    ("What is the largest file I can upload to a self-hosted server, and what error do I get above it?",
     [R(INS, "Largest single file the server accepts, in gigabytes"),
      R(TS, "The file is larger than the server upload limit")], ["multi-doc", "table"]),
    ("How much does the Team plan cost per year with annual billing?",
     [R(ORD, "the Team plan costs USD 24.00 per month or USD 240.00 per year"),
      R(CSV, "Team,24,1000,10,1200,Standard,no", 1)], ["multi-doc", "table"]),
    ("Was order TWS-2024-011352 refunded under the 14-day or the 30-day EU rule?",
     [R(ORD, "a company based in Germany, cancelled within the EU refund window"),
      R(DOCX, "could cancel within 14 days of purchase and receive a full refund")],
     ["exact-id", "multi-doc", "temporal"]),
    # ---------------- temporal ----------------
    ("What is the refund window in the EU for a plan bought today?",
     [R(DOCX, "the withdrawal period is 30 days from purchase")], ["temporal"]),
    ("What was the EU refund window before March 2025?",
     [R(DOCX, "could cancel within 14 days of purchase and receive a full refund")], ["temporal"]),
    ("Can I get a refund for a US monthly plan bought in August 2024?",
     [R(DOCX, "Since 2024-07-01, monthly plans are no longer refundable")], ["temporal"]),
    ("What was the refund window in Asia-Pacific before October 2024?",
     [R(DOCX, "the refund window in Asia-Pacific was 7 days")], ["temporal"]),
    # ---------------- Chinese ----------------
    ("出现同步冲突时，我的修改会丢失吗？",
     [R(ZH, "另一个版本会被保存为“冲突副本”"),
      R(AG, "the first upload wins and the second is kept beside it", 1)], ["zh"]),
    ("在中国大陆购买的套餐多少天内可以退款？",
     [R(ZH, "自购买之日起 7 天内可申请全额退款"),
      R(DOCX, "A full refund is available within 7 days of purchase."),
      R(ZBILL, "自购买之日起 7 天内可以申请全额退款。")], ["zh", "multi-doc"]),
    ("存储配额已满怎么办？",
     [R(ZH, "可以删除不需要的文件并清空回收站"),
      R(TS, "delete files you no longer need and empty the Recycle area", 1)], ["zh"]),
    ("公司网络下连不上服务器，提示证书错误怎么办？",
     [R(ZH, "请让网络管理员把代理的根证书安装到操作系统的受信任证书列表中")], ["zh"]),
    ("客服支持中文吗？",
     [R(ZH, "工单可以用简体中文提交"),
      R(ESC, "Tickets are answered in English, German, French, Japanese and Simplified", 1)], ["zh"]),
    ("文件一直显示等待上传，同步失败怎么办？",
     [R(ZH, "如果客户端多次重试后仍然失败")], ["zh"]),
    ("Tidewater Sync 有安卓或苹果手机客户端吗？", [], ["zh", "unanswerable"]),
    # ---------------- other single-doc facts ----------------
    ("Where are the desktop agent log files stored?",
     [R(TS, "Before contacting support, collect the logs.")], []),
    ("What hardware does a self-hosted server need for 50 users?",
     [R(INS, "Minimum sizing for a team of up to 50 users")], []),
    ("How long is an API access token valid?",
     [R(API, "Access tokens are valid for 24 hours."),
      R(TS, "used an access token older than 24 hours", 1)], []),
    ("What is the maximum page size for API list endpoints?",
     [R(API, "The default page size is 50 and the maximum is 200")], []),
    ("What can the workspace Owner do that an Admin cannot?",
     [R(PERM, "Only the Owner can transfer ownership, delete the workspace")], []),
    ("Which identity providers have been tested with SSO?",
     [R(PERM, "Tested identity providers are Microsoft Entra ID, Okta, Google Workspace and Keycloak.")], []),
    ("How long are audit log entries kept?",
     [R(PERM, "Entries are kept for 1 year on Business and Enterprise plans")], []),
    ("Which Linux distributions does the desktop agent support?",
     [R(INS, "Ubuntu 22.04 LTS, Ubuntu 24.04 LTS, Debian 12 and Fedora 40")], []),
    ("How is a Sev2 support issue defined?",
     [R(ESC, "A major function such as uploading or signing in fails for many")], []),
    ("Do we get a service credit when support misses a response time?",
     [R(ESC, "earns a service credit of 5 percent of that month's fee")], []),
    ("How long does moving a workspace to another region make it read-only?",
     [R(RES, "During the move the workspace is read-only for up to 72 hours")], []),
    ("Which headers must every API request carry?",
     [R(API, "Every request must carry two headers")], []),
    # ---------------- unanswerable ----------------
    ("What does error code TW-E8123 mean?", [], ["unanswerable", "exact-id"]),
    ("How do I send Tidewater Sync notifications to a Slack channel?", [], ["unanswerable"]),
    ("How do I turn on end-to-end encryption for a shared folder?", [], ["unanswerable"]),
    ("How much does the Platinum plan cost per month?", [], ["unanswerable"]),
    ("What is the GraphQL endpoint of the Tidewater API?", [], ["unanswerable"]),
    ("What new features are in release 3.6.0?", [], ["unanswerable", "exact-id"]),
    ("How much does the Priority support tier cost as a separate add-on?", [], ["unanswerable"]),
    ("What is the maximum length of a share link password?", [], ["unanswerable"]),
    ("Can I mount my Tidewater folder over WebDAV?", [], ["unanswerable"]),
    ("What monthly uptime percentage does Tidewater Sync guarantee?", [], ["unanswerable"]),
    ("How do I enable two-factor authentication for my account?", [], ["unanswerable"]),
    ("Can I pay for my subscription with PayPal?", [], ["unanswerable"]),
    ("What is the default value of sync.max_parallel_uploads?", [], ["unanswerable", "exact-id"]),
    # q099-q110, more unanswerable ones (issue 16: refusals are fitted on labelled questions).
    # Checked by a case-insensitive grep of every document's visible text (visible_units below):
    # q099-q104 name things the corpus never mentions (0 hits for the words in brackets);
    # q105-q110 are near misses: the section named answers something close but not this.
    ("Is there a Helm chart for running Tidewater Server on Kubernetes?", [],
     ["unanswerable"]),  # [helm, kubernetes, k8s]
    ("How do I migrate my files from Dropbox to Tidewater Sync?", [],
     ["unanswerable"]),  # [dropbox]
    ("Is Tidewater Sync HIPAA compliant, and will you sign a BAA?", [],
     ["unanswerable"]),  # [hipaa, compliant, compliance, baa, business associate]
    ("Can I install the Tidewater desktop agent on a Chromebook?", [],
     ["unanswerable"]),  # [chromebook, chrome]; install.md lists Windows, macOS and Linux only
    ("Is there a Terraform provider for managing Tidewater workspaces and members?", [],
     ["unanswerable"]),  # [terraform]
    ("Can I connect Tidewater Sync to Zapier to automate workflows?", [],
     ["unanswerable"]),  # [zapier]
    ("Which IP addresses do webhook deliveries come from, so we can allow them through our firewall?", [],
     ["unanswerable"]),  # api/reference.html Webhooks: events, signing, retries; no IP ("ip address" 0 hits)
    ("In which file format is the audit log exported?", [],
     ["unanswerable"]),  # security/permissions.md: "audit.read: export the audit log", no format given
    ("How long does a share link stay valid when no expiry date is set?", [],
     ["unanswerable"]),  # POST /v2/shares: expires_at optional; permissions.md: "link expiry defaults", no value
    ("How many custom roles can an Enterprise workspace create?", [],
     ["unanswerable"]),  # permissions.md: Enterprise "can also create custom roles", no limit
    ("How long are support bundles kept after a support ticket is closed?", [],
     ["unanswerable"]),  # data-residency.md: bundles "kept in the region of the workspace", no duration
    ("Where can I download Tidewater's yearly transparency report?", [],
     ["unanswerable"]),  # data-residency.md: "A yearly transparency report lists ...", no location
    # q111-q116: off-topic questions a chat front-end receives, far from every document (an
    # answerability model fitted on near misses alone learnt that a chunk *less* like the question
    # meant "answerable": tests/test_answerability.py). Grep: [mona lisa, jupiter, moons, banana,
    # world cup, boiling, fahrenheit, 北京, 天气] 0 hits.
    ("Who painted the Mona Lisa?", [], ["unanswerable", "off-topic"]),
    ("How many moons does Jupiter have?", [], ["unanswerable", "off-topic"]),
    ("What is a good recipe for banana bread?", [], ["unanswerable", "off-topic"]),
    ("Which team won the 2018 football World Cup?", [], ["unanswerable", "off-topic"]),
    ("What is the boiling point of water in Fahrenheit?", [], ["unanswerable", "off-topic"]),
    ("明天北京的天气怎么样？", [], ["unanswerable", "off-topic", "zh"]),
    # q117-q147: Chinese questions over the Chinese manual pages (zh/install.md, zh/troubleshooting.md,
    # zh/billing.md, zh/security.md), each also graded 1 on the English page stating the same fact
    # (an answer in another language). zh-literal: worded like the Chinese page. zh-paraphrase:
    # everyday words or a described symptom instead of the page's terms (checked with a jieba word
    # segmentation of question and answering section, function words left out: the words in brackets
    # are the only content words they share).
    # ---- zh-literal
    ("客户端的本地索引需要多少可用磁盘空间？",
     [R(ZINS, "本地索引还需要至少 2 GB 可用磁盘空间"),
      R(INS, "2 GB of free disk space for its local index", 1)], ["zh", "zh-literal"]),
    ("自建服务器首次启动时打印的初始化链接多久内有效？",
     [R(ZINS, "请在 60 分钟内打开该链接并创建第一个 Owner 账户"),
      R(INS, "Open it within 60 minutes to create the first Owner account", 1)], ["zh", "zh-literal"]),
    ("升级时应该先升级服务器还是先升级客户端？",
     [R(ZINS, "请先升级服务器，再升级客户端。"),
      R(INS, "Upgrade the server before the agents.", 1)], ["zh", "zh-literal"]),
    ("在 macOS 和 Linux 上使用代理时，代理密码保存在哪里？",
     [R(ZINS, "代理密码保存在系统钥匙串中，不会写入 agent.yaml。"),
      R(INS, "The password is kept in the system keychain, never in agent.yaml.", 1)], ["zh", "zh-literal"]),
    ("TW-E2203 本地索引损坏应该怎么处理？",
     [R(ZTS, "退出客户端，然后重建索引"),
      R(TS, "quit the agent and rebuild the index", 1)], ["zh", "zh-literal", "exact-id"]),
    ("桌面客户端的日志文件在哪里？",
     [R(ZTS, "桌面客户端的日志文件位于"),
      R(TS, "Before contacting support, collect the logs.", 1)], ["zh", "zh-literal"]),
    ("错误代码 TW-E3310 是什么意思？",
     [R(ZTS, "文件名包含服务器不允许的字符，例如结尾的句点或冒号"),
      R(TS, "such as a trailing dot or a colon", 1)], ["zh", "zh-literal", "exact-id", "table"]),
    ("Team 套餐每分钟可以发送多少个 API 请求？",
     [R(ZBILL, "API 请求数/分钟"),
      R(CSV, "Team,24,1000,10,1200,Standard,no", 1),
      R(API, "Limits are counted per workspace, not per token", 1)], ["zh", "zh-literal", "table"]),
    ("订单状态 pending_payment 表示什么？",
     [R(ZBILL, "订单已创建，但尚未确认收款。"),
      R(ORD, "The order was created but the payment has not been confirmed yet.", 1)],
     ["zh", "zh-literal", "exact-id", "table"]),
    ("发票号 INV-2024-11-0932 的各部分分别代表什么？",
     [R(ZBILL, "依次为前缀、年份、月份和当月序号"),
      R(ORD, "prefix, year, month, sequence within the month", 1)], ["zh", "zh-literal", "exact-id"]),
    ("每个付费席位最多可以邀请几位访客？",
     [R(ZSEC, "每个付费席位最多可以邀请 5 位访客。"),
      R(PERM, "each workspace may invite at most 5 guests per paid seat", 1)], ["zh", "zh-literal"]),
    ("哪些身份提供商经过了单点登录的测试？",
     [R(ZSEC, "经过测试的身份提供商有 Microsoft Entra ID、Okta、Google Workspace 和 Keycloak"),
      R(PERM, "Tested identity providers are Microsoft Entra ID, Okta, Google Workspace and Keycloak.", 1)],
     ["zh", "zh-literal"]),
    ("审计日志会保留多长时间？",
     [R(ZSEC, "Business 和 Enterprise 套餐的日志保留 1 年"),
      R(PERM, "Entries are kept for 1 year on Business and Enterprise plans", 1)], ["zh", "zh-literal"]),
    ("Editor 角色有哪些权限标签？",
     [R(ZSEC, "创建和修改文件的普通成员"),
      R(PERM, "Regular members who create and change files", 1)], ["zh", "zh-literal", "table"]),
    # ---- zh-paraphrase
    ("我这台旧笔记本只有 2G 运存，跑得动这个软件吗？",  # []
     [R(ZINS, "客户端至少需要 4 GB 内存。"),
      R(INS, "The agent needs at least 4 GB of RAM", 1)], ["zh", "zh-paraphrase"]),
    ("不打算用了，把这个软件从系统里清理掉，我存在本机的那些资料还留着吗？",  # [系统]
     [R(ZINS, "卸载客户端不会删除同步文件夹及其中的文件"),
      R(INS, "Uninstalling does not delete the sync folder or its files", 1)], ["zh", "zh-paraphrase"]),
    ("IT 同事问：要不要在每台员工机器上放行一个外面能连进来的口子？",  # []
     [R(ZINS, "客户端只发起出站连接，从不监听入站连接，因此不需要在电脑上开放任何端口"),
      R(INS, "It never listens for inbound connections, so no port has to be opened on the computer itself.", 1)],
     ["zh", "zh-paraphrase"]),
    ("自己搭的服务端第一次跑起来后，我隔了两个小时才去建管理员，现在进不去了怎么办？",  # [建]
     [R(ZINS, "超时后链接失效，需要运行 tidewater-admin reset-setup 重新生成"),
      R(INS, "after that the link expires and you must run tidewater-admin reset-setup to get a new one", 1)],
     ["zh", "zh-paraphrase"]),
    ("用公司统一账号进系统，结果总是被弹回最开始那一步，一直进不去，怎么回事？",  # []
     [R(ZTS, "多半是电脑时钟不准"),
      R(TS, "the computer's clock is probably wrong", 1)], ["zh", "zh-paraphrase"]),
    ("刚装好软件，电脑风扇狂转、卡得要命，这样有问题吗？",  # []
     [R(ZTS, "客户端正在建立本地索引，并为每个文件计算校验和"),
      R(TS, "the agent is building its local index and calculating checksums for every file", 1)],
     ["zh", "zh-paraphrase"]),
    ("我在 Ubuntu 上找不到它在屏幕右上角的小标志，程序是不是没在跑？",  # []
     [R(ZTS, "基于 GNOME 的桌面需要安装 AppIndicator 扩展才能显示托盘图标"),
      R(TS, "desktops based on GNOME need an AppIndicator extension to show tray icons", 1)],
     ["zh", "zh-paraphrase"]),
    ("昨天突然停电，电脑一下子黑屏了，今天这个软件就停下来不干活了，怎么恢复？",  # []
     [R(ZTS, "最常见的原因是写入过程中强制关机，或者磁盘出错"),
      R(TS, "most often by a forced shutdown during a write or by disk errors", 1)], ["zh", "zh-paraphrase"]),
    ("出差十来天没开电脑，回来后软件让我再验证一次身份，里面的东西会不会全都再拉一遍？",  # [电脑]
     [R(ZTS, "本地已有的内容不会被重新下载"),
      R(TS, "your files are not re-downloaded", 1)], ["zh", "zh-paraphrase"]),
    ("只有一个表格怎么都传不上去，别的都好好的，可能是什么原因？",  # [只有]
     [R(ZTS, "可能是它被另一个程序锁定了"),
      R(TS, "it may be locked by another program", 1)], ["zh", "zh-paraphrase"]),
    ("一次交一整年的钱有没有优惠？",  # []
     [R(ZBILL, "按年付费的价格等于 10 个月的月费"),
      R(ORD, "Annual billing costs the same as 10 months of monthly billing.", 1)], ["zh", "zh-paraphrase"]),
    ("团队新来了三个同事，能不能只多买三个账号？",  # []
     [R(ZBILL, "以 10 个为一组出售"),
      R(ORD, "are sold in packs of 10", 1)], ["zh", "zh-paraphrase"]),
    ("我们走对公汇款交的钱，后台好几天都显示没到账，正常吗？",  # []
     [R(ZBILL, "银行转账的订单可能在这个状态停留最多 5 个工作日"),
      R(ORD, "Bank transfers can stay in this state for up to 5 business days.", 1)], ["zh", "zh-paraphrase"]),
    ("我们之前一直付美金，现在想换一种货币来交费，行吗？",  # []
     [R(ZBILL, "工作区的结算币种在首笔订单之后无法更改"),
      R(ORD, "The currency of a workspace cannot be changed after the first order.", 1)],
     ["zh", "zh-paraphrase"]),
    ("外包的设计师只需要看一个目录，要不要专门给他买个账号？",  # []
     [R(ZSEC, "访客不占用席位。"),
      R(PERM, "Guests do not take up a seat", 1)], ["zh", "zh-paraphrase"]),
    ("同事离职后我们在公司账号系统里把他删了，他多久就打不开我们的资料了？",  # []
     [R(ZSEC, "在身份提供商中被移除的成员会在 5 分钟内失去访问权限"),
      R(PERM, "Members removed in the identity provider lose access within 5 minutes", 1)],
     ["zh", "zh-paraphrase"]),
    ("发出去的分享地址想收回来，对方之后再点开会看到什么？",  # [看到]
     [R(ZSEC, "链接被撤销后立即失效"),
      R(API, "Revokes a share link immediately.", 1)], ["zh", "zh-paraphrase"]),
    # ---- unanswerable, near misses (grep of the visible text: [微信, 支付宝, wechat, alipay, 界面,
    # interface] 0 hits; refunds go "to the original payment method" and support/escalation.txt
    # LANGUAGES lists the languages tickets are answered in; nothing names payment methods or the
    # web console's display language)
    ("在中国大陆可以用微信或支付宝付款吗？", [], ["unanswerable", "zh"]),
    ("网页控制台可以切换成中文界面吗？", [], ["unanswerable", "zh"]),
    # ---- q150-q160 (2026-12-02), questions the post-processing options of issue 21 need.
    # conflict: manual/large-files.md (updated 2025-09-15) and its older copy
    # archive/large-files-2023.md (updated 2023-05-10) disagree on each answer; only the newer
    # page is labelled, so an option that puts the older page first costs nDCG.
    ("What is the largest file the Tidewater agent can sync?",
     [R(LF, "The agent syncs a single file of up to 50 GB.")], ["conflict"]),
    ("How many computers can one member link to a workspace?",
     [R(LF, "Each member can link up to 10 computers to the same workspace.")], ["conflict"]),
    ("Can the agent sync a folder on a network drive?",
     [R(LF, "The agent can sync a folder on a network drive (SMB or NFS)")], ["conflict"]),
    ("What part size does the agent use when uploading files over 4 GB?",
     [R(LF, "Files over 4 GB are uploaded in parts of 64 MB")], ["conflict"]),
    # long-section: the answer is one sentence inside the long "Copying the data" section of
    # manual/server-move.md (several chunks of one section)
    ("Why must I copy the server's identity key when moving a self-hosted server?",
     [R(SM, "an agent that sees a different key refuses to connect")], ["long-section"]),
    ("How long does the first start of a moved server take?",
     [R(SM, "for a million files this takes about ten minutes")], ["long-section"]),
    ("What happens if a block gets damaged while copying the block directory to the new machine?",
     [R(SM, "a block that was damaged on the way is detected the first time it is read")], ["long-section"]),
    ("Do members need to change anything in their agents after we move our server to a new machine?",
     [R(SM, "Keep the public address unchanged, so that agents do not need any new settings")],
     ["long-section", "paraphrase"]),
    # near-duplicates: support/maintenance.md repeats one paragraph per region with only the
    # region and times changed; the other relevant pages must get past its near-identical windows
    ("What happens to my edits while the service is down for scheduled maintenance?",
     [R(MT, "Desktop agents switch to offline mode and queue your changes locally"),
      R(AG, "it switches to offline mode and queues changes locally", 1),
      R(TS, "The server is temporarily unavailable, usually during maintenance", 1)],
     ["near-duplicates", "multi-doc"]),
    ("When is the scheduled maintenance window for the CN region?",
     [R(MT, "first Saturday of each month from 01:00 to 03:00 China Standard Time")], ["near-duplicates"]),
    ("Is the web console usable during maintenance, and how early are windows announced?",
     [R(MT, "During the window the web console is read-only and uploads pause."),
      R(MT, "The status page announces each window at least 7 days in advance.")], ["near-duplicates"]),
]

# ---------------------------------------------------------------- visible text
def md_lines(text):
    out = []
    for line in text.splitlines():
        line = re.sub(r"^\s*#+\s*", "", line)
        line = line.replace("`", "").replace("**", "")
        line = re.sub(r"^\s*(\d+\.|-)\s+", "", line)
        out.extend(c.strip() for c in line.split("|"))
    return out


def visible_units(doc):
    p = CORPUS / doc
    if p.suffix == ".md":
        return md_lines(p.read_text(encoding="utf-8"))
    if p.suffix in (".txt", ".csv"):
        return p.read_text(encoding="utf-8").splitlines()
    if p.suffix == ".html":
        t = p.read_text(encoding="utf-8")
        t = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", t, flags=re.S)
        blocks = re.split(r"</?(?:p|h[1-6]|td|th|li|pre|tr|nav|footer)[^>]*>", t)
        return [html.unescape(re.sub(r"<[^>]+>", "", b)) for b in blocks]
    if p.suffix == ".docx":
        from docx import Document
        d = Document(p)
        return [x.text for x in d.paragraphs] + [c.text for tb in d.tables for r in tb.rows for c in r.cells]
    if p.suffix == ".pdf":
        import pypdfium2 as pdfium
        lines = []
        for page in pdfium.PdfDocument(str(p)):
            lines += page.get_textpage().get_text_range().splitlines()
        return lines
    raise ValueError(doc)


def main():
    cache, errors, rows = {}, [], []
    for i, (question, rel, tags) in enumerate(Q, 1):
        qid = f"q{i:03d}"
        for r in rel:
            if not (CORPUS / r["doc"]).exists():
                errors.append(f"{qid}: missing doc {r['doc']}")
                continue
            units = cache.setdefault(r["doc"], visible_units(r["doc"]))
            if not any(r["evidence"] in u for u in units):
                errors.append(f"{qid}: evidence not found in one unit of {r['doc']}: {r['evidence']!r}")
        if not rel and "unanswerable" not in tags:
            errors.append(f"{qid}: no relevant docs but not tagged unanswerable")
        rows.append({"id": qid, "question": question, "relevant": rel, "tags": tags})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts = Counter(t for row in rows for t in row["tags"])
    print(f"{len(rows)} questions written to {OUT}")
    for tag, n in sorted(counts.items()):
        print(f"  {tag}: {n}")
    print(f"  (untagged: {sum(1 for r in rows if not r['tags'])})")
    for e in errors:
        print("ERROR", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
