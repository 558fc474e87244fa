"""Write eval_sets/fastapi-zh.jsonl: Chinese questions for FastAPI 0.110.0's Chinese docs (issue 32).

    .venv/bin/python bench/docs_set.py --set fastapi-zh     # the 84 pages, into bench/out/fastapi-zh-docs
    .venv/bin/python bench/make_fastapi_zh_set.py           # checks and prints; --write writes the set

The questions were written by hand from the pages, as a Chinese developer would ask them, before
kbtool was run on them (see eval_sets/README.md). Checks: every evidence occurs in its page;
every unanswerable question's grep terms occur in no page; every paraphrase shares at most two
content words (jieba, function words left out: ``zh_overlap.py``) with its answering section.
"""
import json, os, re, sys, glob
sys.path.insert(0, os.path.dirname(__file__))
from zh_overlap import overlap, words, section, ROOT  # noqa: E402

E, H, P, M, U, N = "exact-id", "how-to", "paraphrase", "mixed", "unanswerable", "near-miss"

def R(doc, ev, g=2):
    return {"doc": doc, "evidence": ev, "grade": g}

# (question, [relevant], [tags])  -- answerable
A = [
 # ---------------- exact-id (+ mixed) ----------------
 ("CORSMiddleware 的 max_age 默认是多少秒？",
  [R("tutorial/cors.md", "设定浏览器缓存 CORS 响应的最长时间，单位是秒")], [E, M]),
 ("BackgroundTasks 的 .add_task() 除了任务函数本身，还能传哪些参数？",
  [R("tutorial/background-tasks.md", "应按顺序传递给任务函数的任意参数序列")], [E, M]),
 ("raise HTTPException 的时候，detail 只能传字符串吗？能不能传 dict？",
  [R("tutorial/handling-errors.md", "传递任何能转换为 JSON 的值")], [E, M]),
 ("response_model_exclude_unset=True 会对返回结果产生什么影响？",
  [R("tutorial/response-model.md", "然后响应中将不会包含那些默认值，而是仅有实际设置的值")], [E, M]),
 ("Depends 里的 use_cache=False 是干什么用的？同一个请求里同一个依赖默认会被调用几次？",
  [R("tutorial/dependencies/sub-dependencies.md", "FastAPI 不会为同一个请求多次调用同一个依赖项")], [E, M]),
 ("生产环境用 uvicorn 启动的时候还要带 --reload 吗？",
  [R("deployment/manually.md", "选项消耗更多资源，并且更不稳定"),
   R("tutorial/first-steps.md", "仅在开发时使用该选项", 1),
   R("index.md", "仅在开发时使用该选项", 1)], [E, M]),
 ("想强制 grant_type 必须是 password，OAuth2PasswordRequestForm 能做到吗？",
  [R("tutorial/security/simple-oauth2.md", "如需强制使用固定值")], [E, M]),
 ("OAuth2PasswordBearer(tokenUrl=\"token\") 会自动帮我生成 /token 这个接口吗？",
  [R("tutorial/security/first-steps.md", "该参数不会创建端点或")], [E, M]),
 ("jsonable_encoder 返回的是一个 JSON 字符串吗？",
  [R("tutorial/encoder.md", "这个操作不会返回一个包含JSON格式（作为字符串）数据的庞大的")], [E, M]),
 ("root_path_in_servers=False 这个参数有什么作用？",
  [R("advanced/behind-a-proxy.md", "就不会在 OpenAPI 概图中包含服务器了")], [E, M]),
 ("路径操作上设置 include_in_schema=False 以后，这个接口还会出现在 /docs 里吗？",
  [R("advanced/path-operation-advanced-configuration.md", "就从自动化文档系统中排除掉了")], [E, M]),
 ("RedirectResponse 默认返回的是哪个 HTTP 状态码？",
  [R("advanced/custom-response.md", "默认情况下使用 307 状态代码")], [E, M]),
 ("WebSocket 端点的依赖里校验失败了，应该抛 HTTPException 还是 WebSocketException？",
  [R("advanced/websockets.md", "由于这是一个 WebSocket，抛出")], [E, M]),
 ("get_settings() 上面加 @lru_cache 装饰器是为了什么？",
  [R("advanced/settings.md", "因此只有在第一次调用它时，才会创建")], [E, M]),
 ("Header 参数把 convert_underscores 设成 False 之前要注意什么？",
  [R("tutorial/header-params.md", "一些HTTP代理和服务器不允许使用带有下划线的headers")], [E, M]),
 ("用 gunicorn 跑 FastAPI 时，--worker-class 应该填什么？",
  [R("deployment/server-workers.md", "在worker进程中使用的与 Gunicorn 兼容的工作类")], [E, M]),
 ("SQLAlchemy 的 create_engine 里为什么要加 connect_args={\"check_same_thread\": False}？换成 PostgreSQL 还要吗？",
  [R("tutorial/sql-databases.md", "默认情况下，SQLite 只允许一个线程与其通信")], [E, M]),
 ("Field 应该从 fastapi 导入还是从 pydantic 导入？",
  [R("tutorial/body-fields.md", "导入的，而不是像其他的")], [E, M]),
 ("带 yield 的依赖里，在 yield 之后再 raise HTTPException 能返回错误响应吗？",
  [R("tutorial/dependencies/dependencies-with-yield.md", "或类似的异常是很诱人的，但是"),
   R("tutorial/sql-databases.md", "但是您不能从退出代码中引发另一个异常", 1)], [E, M]),
 ("用普通 def 而不是 async def 定义的路径操作函数，会阻塞整个服务器吗？",
  [R("async.md", "它运行在外部的线程池中并等待其结果")], [E, M]),
 ("在 Field 或 Body 里传 example 这种额外参数，会参与数据校验吗？",
  [R("tutorial/schema-extra-example.md", "传递的那些额外参数不会添加任何验证")], [E, M]),
 ("用 TestClient 写的测试函数需要定义成 async def 吗？调用 client 时要 await 吗？",
  [R("tutorial/testing.md", "注意测试函数是普通的")], [E, M]),

 # ---------------- how-to (page's own terms) ----------------
 ("怎么创建一个在每个请求被处理之前和响应返回之前都会工作的中间件？",
  [R("tutorial/middleware.md", "要创建中间件你可以在函数的顶部使用装饰器")], [H]),
 ("如何从一个目录中自动提供静态文件？",
  [R("tutorial/static-files.md", "从目录中自动提供静态文件")], [H]),
 ("怎么把查询参数声明成必需参数？",
  [R("tutorial/query-params.md", "但当你想让一个查询参数成为必需的，不声明任何默认值就可以"),
   R("tutorial/query-params-str-validations.md", "只需不声明默认值就可以使", 1)], [H]),
 ("怎么只更新部分数据，让其余数据保持不变？",
  [R("tutorial/body-updates.md", "即，只发送要更新的数据，其余数据保持不变")], [H]),
 ("怎么为整个应用添加全局依赖项，让每个路径操作都执行它？",
  [R("tutorial/dependencies/global-dependencies.md", "可以把依赖项添加至整个")], [H]),
 ("怎么把一个 Python 类用作依赖项？",
  [R("tutorial/dependencies/classes-as-dependencies.md", "你可以使用一个 Python 类作为一个依赖项")], [H]),
 ("测试的时候怎么让启动和关闭事件处理器也运行起来？",
  [R("advanced/testing-events.md", "在测试中运行事件处理器")], [H]),
 ("测试时如何用覆盖依赖项把数据库换成单独的测试数据库？",
  [R("advanced/testing-database.md", "测试时使用覆盖依赖项返回自定义数据库会话代替正常的依赖项")], [H]),
 ("如何在响应中设置 cookie？",
  [R("advanced/response-cookies.md", "这样你就可以在这个临时响应对象中设置cookie了")], [H]),
 ("怎么固定项目里使用的 FastAPI 版本？",
  [R("deployment/versions.md", "你应该做的第一件事是将你正在使用的")], [H]),
 ("用类型提示声明字典时，怎么分别指定键和值的类型？",
  [R("python-types.md", "时，需要传入两个子类型，用逗号进行分隔")], [H]),
 ("怎么测试 WebSockets？",
  [R("advanced/testing-websockets.md", "测试 WebSockets 也使用")], [H, M]),
 ("怎么创建带参数的依赖项，避免为每种固定内容都写一个函数或类？",
  [R("advanced/advanced-dependencies.md", "但也可以为依赖项设置参数，避免声明多个不同的函数或类")], [H]),
 ("如果需要执行依赖项但用不到它的返回值，应该怎么声明？",
  [R("tutorial/dependencies/dependencies-in-path-operation-decorators.md", "对于这种情况，不必在声明")], [H]),
 ("像数据库迁移这种启动前的步骤，在运行多个工作进程时应该怎么执行？",
  [R("deployment/concepts.md", "因此，在启动应用程序之前，您将需要一个"),
   R("deployment/docker.md", "那么你可能希望有一个", 1)], [H]),
 ("为了跟着教程学习，怎么安装 FastAPI 和所有可选依赖？",
  [R("tutorial/index.md", "为了使用本教程，你可能需要安装所有的可选依赖及对应功能"),
   R("index.md", "命令来安装以上所有依赖", 1)], [H]),
 ("只有一个请求体参数时，怎么让它期望外面再包一层、以参数名作为键的 JSON？",
  [R("tutorial/body-multiple-params.md", "在仅声明了一个请求体参数的情况下，将原本的请求体嵌入到一个键中")], [H]),
 ("怎么声明 cookie 参数？如果不专门声明，会被当成什么参数？",
  [R("tutorial/cookie-params.md", "来声明 cookie 参数，否则参数将会被解释为查询参数")], [H]),

 # ---------------- paraphrase (no API names, no English, few shared words) ----------------
 ("网页脚本去调另一个站点的接口时被拦截了，服务端要怎么放行？",
  [R("tutorial/cors.md", "一个允许跨域请求的源列表")], [P]),
 ("用户点了提交想马上给他回个结果，发通知邮件这种慢活儿能不能挪到后面慢慢做？",
  [R("tutorial/background-tasks.md", "您可以立即返回响应并在后台发送电子邮件通知")], [P]),
 ("有人传一段几十分钟的高清录像上来，会不会全堆在运行内存里把机器撑爆？",
  [R("tutorial/request-files.md", "存储在内存的文件超出最大上限时，FastAPI 会把文件存入磁盘")], [P]),
 ("我有个查看自己资料的地址，老是被另一个带编号的地址抢先匹配，拿到的结果不对，这是怎么回事？",
  [R("tutorial/path-params.md", "是按顺序依次运行的，你需要确保路径")], [P]),
 ("发出去的通行凭据能不能隔几天自动作废，逼对方重新认证一次？",
  [R("tutorial/security/oauth2-jwt.md", "令牌于一周后过期，届时，用户身份验证就会失败")], [P]),
 ("机器有好几个核，可服务只占用了一个，怎么让它同时开几份一起干活？",
  [R("deployment/server-workers.md", "部署应用程序时，您可能希望进行一些"),
   R("deployment/concepts.md", "运行 同时处理同一个应用程序，并在它们之间分发所有请求", 1)], [P]),
 ("每回只改了一行业务逻辑，重新制作发布包都得把所有第三方库再拉一遍，等得心累，有什么窍门？",
  [R("deployment/docker.md", "下载和安装依赖项")], [P]),
 ("想让访客的地址栏出现那把小锁，又不想花钱去买，有什么途径？",
  [R("deployment/https.md", "它以自动方式免费提供"),
   R("tutorial/security/index.md", "你将了解如何使用 Traefik 和 Let's Encrypt 免费设置 HTTPS", 1)], [P]),
 ("我用的查库工具包是老式的同步阻塞写法，处理函数定义时前面还要不要加那个特殊前缀？",
  [R("async.md", "第三方库又不支持使用")], [P]),
 ("口令、秘钥这类机密信息不想硬编码进程序里，怎么在启动的时候从外面塞进来？",
  [R("advanced/settings.md", "因此，通常会将它们提供为由应用程序读取的环境变量")], [P]),
 ("有个老字段还有旧客户在用，暂时删不掉，但想在说明页面上提醒大家别再用了，怎么弄？",
  [R("tutorial/query-params-str-validations.md", "你不得不将其保留一段时间")], [P]),
 ("注册以后回包里把对方刚填的口令又原样带回去了，怎么把它滤掉？",
  [R("tutorial/response-model.md", "将会负责过滤掉未在输出模型中声明的所有数据")], [P]),
 ("想单步跟踪，看看请求进来的时候各个变量都是什么值，服务该怎么启动？",
  [R("tutorial/debugging.md", "所以你可以从调试器直接调用")], [P]),
 ("商品件数只接受正数，传零或负数进来要直接拒绝，这个限制写在哪？",
  [R("tutorial/path-params-numeric-validations.md", "将必须是一个大于")], [P]),
 ("前端提交的分类名数组里可能有一样的项，想收到以后自动只留下互不相同的，怎么做？",
  [R("tutorial/body-nested-models.md", "这样，即使你收到带有重复数据的请求，这些数据也会被转换为一组唯一项")], [P]),
 ("服务挂到网关的二级目录下面以后，自带的在线说明页就打不开了，怎么办？",
  [R("advanced/behind-a-proxy.md", "并添加应用不能识别的附加路径前缀配置")], [P]),
 ("服务刚起来的时候想先把模型加载好、准备好初始数据，然后才开始对外处理访问，能做到吗？",
  [R("advanced/events.md", "应用才开始接收请求")], [P]),
 ("同一个接口平时回 200，碰到东西不存在、新建出来时想回 201，怎么按情况改？",
  [R("advanced/response-change-status-code.md", "但如果数据不存在，你想创建它，并返回一个HTTP状态码为"),
   R("advanced/additional-status-codes.md", "并且当这些条目不存在时，会自动创建并返回 201")], [P]),

 # ---------------- mixed (English product / tech words), not exact-id ----------------
 ("在 Kubernetes 集群里跑 FastAPI，每个容器里还需要用 Gunicorn 起多个 worker 吗？",
  [R("deployment/docker.md", "你可能希望每个容器（但可能有多个容器）只有一个"),
   R("deployment/server-workers.md", "使用 Gunicorn，而是运行", 1)], [M]),
 ("JWT 令牌是加密的吗？别人拿到以后能看到里面的内容吗？",
  [R("tutorial/security/oauth2-jwt.md", "JWT 字符串没有加密，任何人都能用它恢复原始信息")], [M]),
 ("OAuth2 密码流登录的时候，用户名和密码能用 JSON 发给后端吗？",
  [R("tutorial/security/simple-oauth2.md", "因此，不能使用 JSON 对象"),
   R("tutorial/request-forms.md", "通过表单字段发送，不能用 JSON", 1)], [M]),
 ("HTTPS 证书是跟域名绑定还是跟 IP 绑定？",
  [R("deployment/https.md", "而不是与 IP 地址相关联")], [M]),
 ("GET 请求可以带 JSON 请求体吗？",
  [R("tutorial/body.md", "操作（HTTP 方法）发送请求体")], [M]),
 ("前端是 TypeScript 写的，能根据 OpenAPI 自动生成调用后端 API 的客户端代码吗？",
  [R("advanced/generate-clients.md", "一个非常有趣的替代方案是"),
   R("tutorial/first-steps.md", "你还可以使用它自动生成与你的 API 进行通信的客户端代码", 1)], [M]),
 ("Flask 里的 Blueprint 在 FastAPI 里对应的是什么？",
  [R("tutorial/bigger-applications.md", "那这将相当于 Flask 的 Blueprints")], [M]),
 ("部署到 Deta 的时候 requirements.txt 里需要写 uvicorn 吗？",
  [R("deployment/deta.md", "在 Deta 上部署时无需安装 Uvicorn")], [M]),
 ("接口想返回 XML 格式的数据，该怎么做？",
  [R("advanced/response-directly.md", "你可以把你的 XML 内容放到一个字符串中")], [M]),
 ("Swagger UI 的地址能改成 /documentation 吗？顺便想把 ReDoc 关掉。",
  [R("tutorial/metadata.md", "例如，设置 Swagger UI 服务于")], [M]),
 ("OpenAPI 规范里定义了哪几种安全方案？",
  [R("tutorial/security/index.md", "OpenAPI 定义了以下安全方案"),
   R("features.md", "OpenAPI 中定义的安全模式，包括", 1)], [M]),
 ("在 OpenAPI 文档里怎么给一个接口额外声明 404 响应以及它对应的模型？",
  [R("advanced/additional-responses.md", "您可以向路径操作装饰器传递参数")], [M]),
 ("直接返回 JSONResponse 时设置的额外状态码，会出现在 API 文档里吗？",
  [R("advanced/additional-status-codes.md", "它们不会包含在 OpenAPI 方案（API 文档）中")], [M]),
 ("路径操作的描述很长，能写在函数的 docstring 里吗？支持 Markdown 吗？",
  [R("tutorial/path-operation-configuration.md", "能正确解析和显示 Markdown 的内容，但要注意文档字符串的缩进")], [M]),
 ("怎么把一个现有的 Flask 应用挂到 FastAPI 里一起跑？",
  [R("advanced/wsgi.md", "来包装你的 WSGI 应用，如：Flask，Django，等等")], [M]),
 # ---------------- plain lookups (no tag) ----------------
 ("状态码 204 和 304 的响应能不能带响应体？",
  [R("tutorial/response-status-code.md", "此响应在没有内容返回给客户端时使用，因此该响应不能包含响应体")], []),
 ("请求里传日期时间字段的话，应该用什么格式的字符串？",
  [R("tutorial/extra-data-types.md", "在请求和响应中将表示为 ISO 8601 格式的")], []),
 ("为什么用户相关的输入模型、输出模型和数据库模型通常要分开定义？",
  [R("tutorial/extra-models.md", "很可能需要保存密码的哈希值"),
   R("tutorial/response-model.md", "相反，我们可以创建一个有明文密码的输入模型和一个没有明文密码的输出模型", 1)], []),
 ("依赖注入一般适用于哪些场景？",
  [R("tutorial/dependencies/index.md", "共享业务逻辑（复用相同的代码逻辑）")], []),
 ("获取当前用户时，用户模型里一定要有用户名吗？能改用邮箱和编号吗？",
  [R("tutorial/security/get-current-user.md", "当然可以。你可以同样地使用这些工具")], []),
]

# unanswerable: (question, grep terms, kind, neighbour page/notes)
UA = [
 ("FastAPI 能不能同时对外提供 gRPC 服务？proto 文件要怎么配？", ["grpc", "protobuf", ".proto"], "never", ""),
 ("怎么把 FastAPI 里没捕获的异常自动上报到 Sentry？", ["sentry"], "never", ""),
 ("有没有官方的 Helm chart，可以直接把 FastAPI 应用装到 K8s 集群里？", ["helm"], "never", "Kubernetes is mentioned in the deployment pages, Helm never"),
 ("用 Strawberry 写的 GraphQL 订阅（subscription）怎么挂到 FastAPI 上？", ["strawberry", "subscription"], "never", "GraphQL itself is listed in features.md/index.md; Strawberry and subscriptions are not"),
 ("FastAPI 怎么配合 Tortoise ORM 做异步数据库访问？", ["tortoise"], "never", ""),
 ("怎么给接口做限流，比如同一个 IP 每分钟最多请求 60 次？", ["限流", "rate limit", "ratelimit", "slowapi", "频率", "速率", "throttl"], "never", ""),
 ("怎么用 PyInstaller 把 FastAPI 项目打包成一个 Windows 可执行文件？", ["pyinstaller", "打包成", "可执行文件", "nuitka"], "never", ""),
 ("怎么接入 OpenTelemetry 做分布式链路追踪？", ["opentelemetry", "链路", "追踪", "jaeger", "tracing"], "never", ""),
 ("登录接口怎么加图形验证码，防止被暴力破解？", ["验证码", "captcha", "暴力破解"], "never", ""),
 ("表单提交怎么防御 CSRF 跨站请求伪造？", ["csrf", "跨站", "xsrf"], "never", ""),
 # near misses
 ("CORSMiddleware 同时设置了 allow_origins 和 allow_origin_regex，两者冲突时以哪个为准？",
  ["优先", "为准", "precedence"], "near", "tutorial/cors.md lists both parameters, says nothing about precedence"),
 ("docker-compose 里怎么给 FastAPI 容器配置健康检查？",
  ["healthcheck", "健康检查", "health"], "near", "deployment/docker.md covers Dockerfile, --restart, Docker Compose in general; no health checks"),
 ("UploadFile 在内存里最多放多少字节才会写到磁盘？这个阈值能改吗？",
  ["max_size", "spool_max", "1024", "kb", "兆字节"], "near", "tutorial/request-files.md: spills to disk 'when exceeding the maximum limit', no number, no setting"),
 ("后台任务执行失败了会不会自动重试？最多重试几次？",
  ["重试", "retry", "retries"], "near", "tutorial/background-tasks.md: how to add tasks, Celery for heavy work; nothing on failures"),
 ("访问令牌过期以后，怎么用 refresh token 无感续期？",
  ["refresh token", "refresh_token", "刷新令牌", "续期", "刷新 token"], "near", "tutorial/security/oauth2-jwt.md: token expiry and re-login only"),
 ("shutdown 事件处理器最多能执行多久？超时会被强制终止吗？",
  ["超时", "timeout", "强制终止"], "near", "advanced/events.md: startup/shutdown handlers, no time limit"),
 ("WebSocket 连接的心跳 ping/pong 间隔默认是多少？",
  ["心跳", "heartbeat", "pong", "ping_interval"], "near", "advanced/websockets.md: receive/send, disconnects, no keep-alive"),
 ("用 set_cookie 设置的 cookie，SameSite 属性默认是什么？",
  ["samesite"], "near", "advanced/response-cookies.md: setting cookies via Response, points to Starlette docs for parameters"),
 (".env 文件里的值和系统环境变量里的同名变量冲突时，以哪个为准？",
  ["优先", "为准", "precedence"], "near", "advanced/settings.md: env vars and .env reading, no precedence rule"),
 ("StaticFiles 返回的静态文件能设置浏览器缓存多久吗，比如 Cache-Control 头？",
  ["cache-control", "max-age", "缓存时间"], "near", "tutorial/static-files.md: mounting only; ETag appears only in custom-response.md FileResponse headers (checked: not about StaticFiles)"),
 ("用 TestClient 测试文件上传接口时，文件要怎么传进去？",
  ["files=", "files 参数", "上传文件的测试"], "near", "tutorial/testing.md lists json, data, headers, cookies; not files"),
 ("查询接口用 skip 和 limit 分页时，怎么顺便返回总条数？",
  ["分页", "pagination", "总条数", "总数", "total"], "near", "tutorial/query-params.md uses skip/limit as example defaults only"),
 ("怎么接入微信扫码登录？",
  ["微信", "wechat", "扫码"], "near", "tutorial/security/index.md names Google, Facebook, Twitter, GitHub third-party login, not WeChat"),
]

MARKUP = set("`*_[]()|#<>")

def all_pages():
    return sorted(glob.glob(ROOT + "**/*.md", recursive=True))

def main(write=False):
    pages = all_pages()
    assert len(pages) == 84, len(pages)
    corpus = {p[len(ROOT):]: open(p, encoding="utf-8").read() for p in pages}
    out = []; errors = []; n = 0; notes = []
    for q, rel, tags in A:
        n += 1
        for r in rel:
            t = corpus.get(r["doc"])
            if t is None: errors.append(("nodoc", q, r)); continue
            ev = r["evidence"]
            if ev not in t: errors.append(("noev", q, r))
            if any(c in MARKUP for c in ev): errors.append(("markup", q, ev))
            if not (6 <= len(ev) <= 45): errors.append(("len", q, ev, len(ev)))
            # evidence must not sit on a code/include line
            for line in t.split("\n"):
                if ev in line and (line.strip().startswith("{!") or line.strip().startswith("```")):
                    errors.append(("codeline", q, ev))
        if P in tags:
            if re.search(r"[A-Za-z]", q): errors.append(("latin-in-paraphrase", q))
            per = []
            for r in rel:
                ov, _ = overlap(q, r["doc"], r["evidence"])
                if len(ov) > 2: errors.append(("overlap", q, r["doc"], ov))
                per.append((r["doc"], r["grade"], ov))
            notes.append((f"z{n:03d}", q, per))
        out.append({"id": f"z{n:03d}", "question": q, "relevant": rel, "tags": tags})
    grep_notes = []
    for q, terms, kind, note in UA:
        n += 1
        hits = {}
        for term in terms:
            for doc, t in corpus.items():
                if term.lower() in t.lower():
                    hits.setdefault(term, []).append(doc)
        if hits: errors.append(("unans-hit", q, hits))
        tags = [U] + ([N] if kind == "near" else [])
        out.append({"id": f"z{n:03d}", "question": q, "relevant": [], "tags": tags})
        grep_notes.append((f"z{n:03d}", q, terms, kind, note))
    ids = [o["id"] for o in out]
    assert len(set(ids)) == len(ids)
    qs = [o["question"] for o in out]; assert len(set(qs)) == len(qs)
    for e in errors: print("ERR", e)
    # stats
    from collections import Counter
    c = Counter(t for o in out for t in o["tags"])
    ans = [o for o in out if o["relevant"]]
    docs = {r["doc"] for o in ans for r in o["relevant"]}
    docs2 = {r["doc"] for o in ans for r in o["relevant"] if r["grade"] == 2}
    print("total", len(out), "answerable", len(ans), "unanswerable", len(out) - len(ans))
    print("tags", dict(c))
    print("mixed not exact-id", sum(1 for o in out if M in o["tags"] and E not in o["tags"]))
    print("untagged", sum(1 for o in out if not o["tags"]))
    print("distinct pages", len(docs), "grade-2 pages", len(docs2))
    for x in notes: print("PARA", x)
    if write and not errors:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "eval_sets", "fastapi-zh.jsonl"), "w", encoding="utf-8") as f:
            for o in out:
                f.write(json.dumps(o, ensure_ascii=False) + "\n")
        print("written")
    return errors

if __name__ == "__main__":
    main(write="--write" in sys.argv)
