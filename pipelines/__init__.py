"""The Dagster code location: definitions, jobs, schedules, sensors, resources, the executors
and the run launcher (the Celery deployment's too), and `make run`'s demo.
In: the assets and the settings (the resources built from them once); out: the jobs,
schedules and sensors the Dagster UI, the daemon and `ctxdb` run.
"""
