"""Conversation topics the sample generator draws from (with labeled queries for search tests)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    """One realistic conversation subject: what users ask and what the agent answers."""

    key: str
    title: str
    prompts: tuple[str, ...]
    followups: tuple[str, ...]
    steers: tuple[str, ...]
    answers: tuple[str, ...]
    attachment: tuple[str, str, str] | None  # (file name, mime, extracted text)
    hosted_file: tuple[str, str, str] | None  # (path under files/, mime, content)
    summary: str
    phrases: tuple[str, ...]
    entities: tuple[str, ...]
    queries: tuple[str, ...]  # paraphrases a person might search with later
    exact: tuple[str, ...]  # literal strings that occur verbatim in the turn
    misspelled: tuple[str, ...]  # near-literal variants with typos


TOPICS: tuple[Topic, ...] = (
    Topic(
        key="openpyxl_xls",
        title="Loading an old Excel file with openpyxl",
        prompts=(
            "My script crashes with openpyxl.utils.exceptions.InvalidFileException: openpyxl does "
            "not support the old .xls file format, please use xlrd to read this file, or convert "
            "it to the more recent .xlsx file format. How do I load the quarterly sales workbook?",
            "load_workbook fails on sales_2019.xls with InvalidFileException. The spreadsheet "
            "comes from an old accounting export. What is the cleanest fix?",
        ),
        followups=(
            "Can I convert all the .xls files in a folder at once?",
            "Will formulas and merged cells survive the conversion?",
        ),
        steers=("Skip LibreOffice, I can't install it on the server.",),
        answers=(
            "openpyxl only reads .xlsx. Read the legacy workbook with pandas.read_excel(path, "
            "engine='xlrd') (xlrd 1.2 still reads .xls) and write it back with "
            "df.to_excel('sales_2019.xlsx', engine='openpyxl'); or batch convert with "
            "soffice --headless --convert-to xlsx *.xls.",
            "The InvalidFileException means the file is the binary BIFF .xls format. Convert it "
            "once to .xlsx (pandas + xlrd, or LibreOffice headless) and keep openpyxl for the "
            "new file; formulas survive LibreOffice conversion, pandas keeps only values.",
        ),
        attachment=(
            "sales_2019.xls",
            "application/vnd.ms-excel",
            "Quarterly sales workbook: sheets Q1 Q2 Q3 Q4, columns region, product, "
            "units, revenue. Exported from the legacy accounting system.",
        ),
        hosted_file=(
            "sales_2019.xlsx",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            "converted workbook bytes",
        ),
        summary="Converted the legacy sales_2019.xls workbook to .xlsx so openpyxl can load it; "
        "root cause was the old BIFF .xls format unsupported by openpyxl.",
        phrases=("InvalidFileException", "openpyxl does not support the old .xls file format"),
        entities=("openpyxl", "xlrd", "sales_2019.xls"),
        queries=(
            "the spreadsheet trouble from last week",
            "excel file would not open in python",
            "converting an old workbook format",
        ),
        exact=(
            "openpyxl.utils.exceptions.InvalidFileException: openpyxl does not support the "
            "old .xls file format",
        ),
        misspelled=("openpyxel invalid file exeption", "opnpyxl xls"),
    ),
    Topic(
        key="timezone_dst",
        title="Timestamps off by one hour after DST",
        prompts=(
            "Our daily report shows events one hour late since the daylight saving switch. We "
            "store naive datetimes and call tz_localize('Europe/Berlin'). What is wrong?",
            "pandas raises pytz.exceptions.AmbiguousTimeError: Cannot infer dst time from "
            "2026-10-25 02:30:00 when localizing the meter readings. How do I handle it?",
        ),
        followups=(
            "Should the database column be timestamptz?",
            "How do I convert the forecast back to local time for the chart?",
        ),
        steers=("Keep everything in UTC internally, only convert at display time.",),
        answers=(
            "Store UTC, convert at the edges: tz_localize('Europe/Berlin', ambiguous='infer', "
            "nonexistent='shift_forward') then tz_convert('UTC'). The one-hour shift comes from "
            "localizing already-UTC values as local time.",
            "Use timestamptz in Postgres and aware datetimes in Python; the AmbiguousTimeError "
            "appears for the repeated hour on the autumn DST switch, pass ambiguous='infer' or an "
            "explicit boolean array.",
        ),
        attachment=(
            "meter_readings.csv",
            "text/csv",
            "timestamp,meter_id,kwh\n2026-10-25 02:30:00,M-17,0.42\n2026-10-25 02:30:00,M-17,0.40",
        ),
        hosted_file=("forecast_utc.csv", "text/csv", "ts_utc,kwh\n2026-10-25T00:30:00Z,0.42\n"),
        summary="Fixed the timezone conversion of the meter readings: localize with "
        "ambiguous='infer', store UTC, convert for display; produced forecast_utc.csv.",
        phrases=("AmbiguousTimeError", "tz_localize", "daylight saving"),
        entities=("Europe/Berlin", "pandas", "timestamptz"),
        queries=("the daylight saving hour bug", "report times shifted by an hour"),
        exact=("pytz.exceptions.AmbiguousTimeError: Cannot infer dst time",),
        misspelled=("ambigous time eror", "tz_localise dst"),
    ),
    Topic(
        key="pandas_merge",
        title="pandas merge duplicates rows",
        prompts=(
            "After pd.merge(orders, customers, on='customer_id') I get 3x more rows than orders. "
            "Why does the merge duplicate rows?",
            "MergeError: Merge keys are not unique in right dataset; not a one-to-one merge. What "
            "does validate='one_to_one' complain about?",
        ),
        followups=("How do I find which customer ids are duplicated?",),
        steers=("Use a left join, I must keep every order.",),
        answers=(
            "The customers table has repeated customer_id values, so each order matches several "
            "rows. Check customers.customer_id.duplicated().sum(), dedupe with drop_duplicates, "
            "then pd.merge(orders, customers, on='customer_id', how='left', validate='m:1').",
        ),
        attachment=None,
        hosted_file=(
            "dedupe_customers.py",
            "text/x-python",
            "customers = customers.drop_duplicates('customer_id')\n",
        ),
        summary="Explained row explosion in pandas merge caused by duplicate customer_id keys; "
        "fix with drop_duplicates and validate='m:1'.",
        phrases=("validate='m:1'", "Merge keys are not unique"),
        entities=("pandas", "customer_id"),
        queries=("joining two tables gave too many rows", "dataframe join duplicated records"),
        exact=("Merge keys are not unique in right dataset",),
        misspelled=("pandas merge dupliactes", "mrege keys not uniqe"),
    ),
    Topic(
        key="docker_network",
        title="Container cannot reach the host database",
        prompts=(
            "My app container gets ECONNREFUSED 127.0.0.1:5432 when connecting to Postgres running "
            "on the host. docker compose up works on my colleague's Mac.",
            "How do two containers in the same compose file talk to each other? The api service "
            "can't resolve the redis hostname.",
        ),
        followups=("Is network_mode: host a good idea in production?",),
        steers=("We run on Linux servers, not Docker Desktop.",),
        answers=(
            "Inside a container 127.0.0.1 is the container itself. On Linux add extra_hosts: "
            "['host.docker.internal:host-gateway'] and connect to host.docker.internal:5432, or "
            "run Postgres as a compose service on the same user-defined bridge network and use "
            "its service name.",
        ),
        attachment=(
            "docker-compose.yml",
            "application/yaml",
            "services:\n  api:\n    build: .\n    ports: ['8000:8000']\n  redis:\n    "
            "image: redis:7",
        ),
        hosted_file=(
            "docker-compose.fixed.yml",
            "application/yaml",
            "services:\n  api:\n    extra_hosts: ['host.docker.internal:host-gateway']\n",
        ),
        summary="Container networking: 127.0.0.1 inside a container is not the host; use "
        "host.docker.internal with host-gateway or a shared bridge network.",
        phrases=("ECONNREFUSED 127.0.0.1:5432", "host.docker.internal", "host-gateway"),
        entities=("Docker", "docker compose", "Postgres"),
        queries=(
            "container could not connect to the database on my machine",
            "docker networking problem",
        ),
        exact=("ECONNREFUSED 127.0.0.1:5432",),
        misspelled=("dokcer netwrok", "host.docker.internl"),
    ),
    Topic(
        key="lisbon_trip",
        title="Three days in Lisbon",
        prompts=(
            "Plan a 3-day trip to Lisbon in early May for two people who love food and "
            "viewpoints, mid-range budget.",
            "What should we not miss in Lisbon? We arrive Friday morning and fly out Sunday "
            "evening.",
        ),
        followups=("Is a day trip to Sintra worth it?", "Where can we eat pasteis de nata?"),
        steers=("We don't want to rent a car.",),
        answers=(
            "Day 1 Alfama and the Miradouro da Senhora do Monte at sunset, dinner in a tasca; "
            "Day 2 Belem (Pasteis de Belem, Jeronimos monastery) and LX Factory; Day 3 train to "
            "Sintra for Pena Palace, back for Time Out Market. Use the 24h Viva Viagem card.",
        ),
        attachment=None,
        hosted_file=(
            "lisbon_itinerary.md",
            "text/markdown",
            "# Lisbon\n- Day 1 Alfama\n- Day 2 Belem\n- Day 3 Sintra\n",
        ),
        summary="Three-day Lisbon itinerary for two without a car: Alfama, Belem, Sintra day "
        "trip, food stops; saved lisbon_itinerary.md.",
        phrases=("Pena Palace", "Viva Viagem"),
        entities=("Lisbon", "Sintra", "Belem"),
        queries=("the portugal vacation plan", "weekend city break itinerary"),
        exact=("Miradouro da Senhora do Monte",),
        misspelled=("lisbn itinery", "sintra pena palce"),
    ),
    Topic(
        key="sourdough",
        title="Sourdough starter not rising",
        prompts=(
            "My sourdough starter smells like nail polish remover and barely rises after a week. "
            "I feed it 1:1:1 rye and water once a day.",
            "How do I get an open crumb in my sourdough? The loaf is dense and gummy.",
        ),
        followups=("What hydration should a beginner use?",),
        steers=("I only have all-purpose flour at home.",),
        answers=(
            "The acetone smell means the starter is hungry: feed twice a day at 1:2:2, keep it at "
            "24-26 C and use the float test. For an open crumb raise hydration to 75%, do "
            "stretch-and-folds and let the bulk ferment rise about 50%.",
        ),
        attachment=None,
        hosted_file=None,
        summary="Revived a hungry sourdough starter (feed 1:2:2 twice daily, warm spot) and "
        "explained bulk fermentation for an open crumb.",
        phrases=("nail polish remover", "stretch-and-folds"),
        entities=("sourdough", "rye"),
        queries=("bread baking help", "my bread dough would not rise"),
        exact=("smells like nail polish remover",),
        misspelled=("sourdogh startr", "stretch and fold"),
    ),
    Topic(
        key="k8s_crashloop",
        title="Pod stuck in CrashLoopBackOff",
        prompts=(
            "kubectl get pods shows my api pod in CrashLoopBackOff with exit code 137 after the "
            "last deploy. Logs are empty.",
            "Back-off restarting failed container in the payments deployment; describe shows "
            "OOMKilled. How do I size the memory limits?",
        ),
        followups=("How do I see the logs of the previous container?",),
        steers=("We can't raise the node size this quarter.",),
        answers=(
            "Exit code 137 with OOMKilled means the container exceeded its memory limit. Check "
            "kubectl logs --previous and kubectl describe pod, raise resources.limits.memory or "
            "lower the JVM heap (-Xmx) to ~75% of the limit.",
        ),
        attachment=(
            "pod-describe.txt",
            "text/plain",
            "State: Waiting Reason: CrashLoopBackOff Last State: Terminated Reason: "
            "OOMKilled Exit Code: 137",
        ),
        hosted_file=(
            "deployment-patch.yaml",
            "application/yaml",
            "resources:\n  limits:\n    memory: 1Gi\n",
        ),
        summary="Diagnosed CrashLoopBackOff as OOMKilled (exit 137); raised memory limit and "
        "capped the JVM heap.",
        phrases=("CrashLoopBackOff", "OOMKilled", "exit code 137"),
        entities=("Kubernetes", "kubectl"),
        queries=("the pod that kept restarting", "kubernetes memory problem"),
        exact=("Back-off restarting failed container",),
        misspelled=("crashlop backoff", "oomkiled"),
    ),
    Topic(
        key="postgres_slow",
        title="Slow Postgres query",
        prompts=(
            "This query takes 12 seconds: SELECT * FROM events WHERE user_id = $1 ORDER BY "
            "created_at DESC LIMIT 20. EXPLAIN shows a Seq Scan on events.",
            "How do I read EXPLAIN ANALYZE output? Rows Removed by Filter: 4812331.",
        ),
        followups=("Would a partial index help for active users only?",),
        steers=("The table is 400 GB, index creation must not lock writes.",),
        answers=(
            "Create a composite index CONCURRENTLY: CREATE INDEX CONCURRENTLY "
            "events_user_created_idx ON events (user_id, created_at DESC); the planner can then "
            "use an Index Scan and stop after 20 rows instead of a Seq Scan.",
        ),
        attachment=(
            "explain.txt",
            "text/plain",
            "Limit -> Sort -> Seq Scan on events Filter: (user_id = 42) Rows Removed by "
            "Filter: 4812331 Execution Time: 12034.112 ms",
        ),
        hosted_file=None,
        summary="Replaced a sequential scan with a composite (user_id, created_at DESC) index "
        "built CONCURRENTLY.",
        phrases=("CREATE INDEX CONCURRENTLY", "Seq Scan"),
        entities=("Postgres", "EXPLAIN ANALYZE"),
        queries=("database query was very slow", "which index to add"),
        exact=("Rows Removed by Filter: 4812331",),
        misspelled=("postgress slow qeury", "explian analyze"),
    ),
    Topic(
        key="react_effect",
        title="useEffect infinite render loop",
        prompts=(
            "My React component re-renders forever: useEffect(() => setItems(filter(data)), "
            "[data, options]) where options is an object literal.",
            "Warning: Maximum update depth exceeded. This can happen when a component calls "
            "setState inside useEffect. How do I fix it?",
        ),
        followups=("Should I use useMemo or useCallback here?",),
        steers=("We are on React 18, no compiler.",),
        answers=(
            "options is a new object each render, so the dependency changes every time. Memoize "
            "it with useMemo, depend on primitive fields, or derive items during render instead "
            "of syncing state in an effect.",
        ),
        attachment=None,
        hosted_file=(
            "ItemList.tsx",
            "text/plain",
            "const opts = useMemo(() => ({ sort }), [sort]);\n",
        ),
        summary="Fixed an infinite render loop caused by an object literal in useEffect "
        "dependencies; memoized with useMemo.",
        phrases=("Maximum update depth exceeded", "useMemo"),
        entities=("React", "useEffect"),
        queries=("frontend component kept re-rendering", "react hook loop"),
        exact=("Maximum update depth exceeded",),
        misspelled=("useefect infinte loop", "maximum update deph"),
    ),
    Topic(
        key="git_rebase",
        title="Git rebase conflict",
        prompts=(
            "git rebase main stops with CONFLICT (content): Merge conflict in src/config.py. How "
            "do I continue without losing my commits?",
            "I force-pushed after a rebase and my teammate's commits disappeared. Can I recover?",
        ),
        followups=("What is the difference between --force and --force-with-lease?",),
        steers=("Don't suggest merge commits, the repo requires linear history.",),
        answers=(
            "Resolve the file, git add src/config.py, then git rebase --continue (or --abort to "
            "go back). To recover lost commits use git reflog and git reset --hard <sha>; push "
            "with --force-with-lease so you never overwrite others' work.",
        ),
        attachment=None,
        hosted_file=None,
        summary="Walked through resolving a rebase conflict and recovering commits with reflog; "
        "recommended --force-with-lease.",
        phrases=("git rebase --continue", "--force-with-lease", "git reflog"),
        entities=("git",),
        queries=("version control conflict", "lost commits after pushing"),
        exact=("CONFLICT (content): Merge conflict in src/config.py",),
        misspelled=("git rebsae conflcit", "force with leese"),
    ),
    Topic(
        key="asyncio_loop",
        title="asyncio event loop is closed",
        prompts=(
            "RuntimeError: Event loop is closed when my aiohttp client script exits on Windows. "
            "The requests all succeed.",
            "How do I run async code from a synchronous Flask view? asyncio.run complains that "
            "it cannot be called from a running event loop.",
        ),
        followups=("Is it safe to share one ClientSession across tasks?",),
        steers=("We must stay on Python 3.11.",),
        answers=(
            "Close the session before the loop ends: use async with aiohttp.ClientSession() as "
            "session and await asyncio.sleep(0) at shutdown; on Windows the Proactor loop "
            "prints 'Event loop is closed' when transports are garbage collected late.",
        ),
        attachment=None,
        hosted_file=(
            "client_fixed.py",
            "text/x-python",
            "async with aiohttp.ClientSession() as session:\n    ...\n",
        ),
        summary="Explained 'RuntimeError: Event loop is closed' from unclosed aiohttp sessions "
        "on the Windows Proactor loop.",
        phrases=("RuntimeError: Event loop is closed", "ClientSession"),
        entities=("asyncio", "aiohttp"),
        queries=("python async shutdown error", "async http client crash on exit"),
        exact=("RuntimeError: Event loop is closed",),
        misspelled=("event lop is closd", "asynco runtime error"),
    ),
    Topic(
        key="marathon",
        title="Marathon training plan",
        prompts=(
            "I ran a half marathon in 1:52 and want to run my first marathon in 16 weeks. How "
            "many days a week should I run?",
            "My knee hurts after long runs above 25 km. Should I skip the 32 km long run?",
        ),
        followups=("What should I eat during the race?",),
        steers=("I can only train four days a week.",),
        answers=(
            "Four runs a week works: one long run building to 32 km, one tempo, one interval "
            "session and one easy run; taper the last three weeks and practice 60-90 g of "
            "carbohydrate per hour during long runs.",
        ),
        attachment=None,
        hosted_file=("marathon_plan.csv", "text/csv", "week,long_run_km\n1,14\n2,16\n"),
        summary="Built a 16-week four-day marathon plan with taper and fueling guidance.",
        phrases=("long run", "taper"),
        entities=("marathon",),
        queries=("running schedule for a race", "training for 42 km"),
        exact=("half marathon in 1:52",),
        misspelled=("maraton trainig plan", "long rn knee"),
    ),
)
