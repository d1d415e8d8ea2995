"""Administration of the Elasticsearch indices every stage keeps (the memory indices, the writer
lease, the shared token store): their replica settings and one-shard index creation, below every
stage that creates an index.
In: an Elasticsearch client, an index name and the replicas setting; out: indices created or
brought to those replicas.
"""
