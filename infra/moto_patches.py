"""Four places where moto's server spends the tests' time without changing any answer.

Measured with py-spy on moto during the test command (docs/history.md, "The test command,
issue 55"): of the samples in DynamoDB requests, 60 % were `copy.deepcopy` inside
`transact_write_items`, which copies every table a transaction names, with every item and every
stream record the table has ever had, to roll back from if the transaction fails. Tests that
write one table many times (the claim races: 200 tasks, 1,600 claims) pay for that copy on every
transaction, so their cost grew with the square of their writes.

`apply()` replaces, in the running server only:

- the whole-table copies with copies of the items the transaction names, and the length of
  each table's stream: a failed transaction puts those items back as they were and drops the
  stream records it added, which is everything moto's rollback restored (a transaction only
  ever changes the items it names; moto keeps no index or count beside the items);
- `moto.backends.list_of_moto_modules`, which lists moto's package folder on the disk for every
  request, with the same list read once;
- the RSA key every new Cognito user pool imports from moto's own resource file (recovering its
  primes in Python, about 50 ms each), with the one imported key: every pool had the same key.

- in SQS, the clock each message's `visible` and `delayed` read (moto's `unix_time_millis`,
  datetime arithmetic of a few microseconds, with `time.time()`: the same epoch milliseconds),
  and the retention check every received message makes, which read the queue's attributes and
  so counted every message of the queue twice, with the queue's retention period read directly:
  a queue of 10,000 messages (the issue-59 scenario `events_cloud::a_link_with_10000_…`)
  received about one message a second, each receive scanning the queue per message.

One more changes an answer, where moto's differs from DynamoDB's: `ImportTable` parsed each
export file with py_partiql_parser's `JsonParser`, which yields nothing for a file whose item
holds an empty map (`{"M": {}}`, as every project item's `durations` starts): the import
"completed" with no items. DynamoDB reads DYNAMODB_JSON as one JSON object per line; so does
the replacement (`_process_s3_files`), which the point-in-time restore rehearsal needs
(`releases::a_point_in_time_restore_…`).

`infra/moto_patches_test.py` checks the rollback against moto's own on the same transactions,
and the patched SQS against moto's on the same messages.
"""

import copy
import json

from moto import backends
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType

_original_transact_write_items = DynamoDBBackend.transact_write_items


def _key_of(table, op):
    """The (hash, range) of the item a transaction operation names, or None."""
    raw = op.get("Key") if "Key" in op else op.get("Item")
    if not isinstance(raw, dict) or table.hash_key_attr not in raw:
        return None
    hash_value = DynamoType(raw[table.hash_key_attr])
    range_value = None
    if table.range_key_attr is not None:
        if table.range_key_attr not in raw:
            return None
        range_value = DynamoType(raw[table.range_key_attr])
    return hash_value, range_value


def _stored(table, key):
    hash_value, range_value = key
    if range_value is None:
        return table.items.get(hash_value)
    return table.items.get(hash_value, {}).get(range_value)


def _restore(table, key, item):
    hash_value, range_value = key
    if range_value is None:
        if item is None:
            table.items.pop(hash_value, None)
        else:
            table.items[hash_value] = item
        return
    if item is None:
        partition = table.items.get(hash_value)
        if partition is not None:
            partition.pop(range_value, None)
            if not partition:
                table.items.pop(hash_value, None)
    else:
        table.items[hash_value][range_value] = item


def transact_write_items(self, transact_items):
    """moto's `transact_write_items`, rolled back from copies of the items it names.

    moto's own code runs unchanged, with `copy` in its module replaced by `_NoTableCopies`: its
    backup of each table is then the live table itself, and its rollback
    (`self.tables[name] = backup`) puts back the object that is already there. The items the
    transaction names and each stream's length, saved here first, are what is restored."""
    saved = []
    streams = {}
    for entry in transact_items if isinstance(transact_items, list) else []:
        if not isinstance(entry, dict) or not entry:
            continue
        _, op = next(iter(entry.items()))
        name = op.get("TableName") if isinstance(op, dict) else None
        table = self.tables.get(name) if isinstance(name, str) else None
        if table is None:
            continue
        if table.stream_shard is not None and name not in streams:
            streams[name] = (table.stream_shard, len(table.stream_shard.items))
        try:
            key = _key_of(table, op)
        except Exception:  # a malformed key: moto's own code refuses it, before any write
            key = None
        if key is not None:
            saved.append((table, key, copy.deepcopy(_stored(table, key))))
    try:
        return _original_transact_write_items(self, transact_items)
    except Exception:
        for table, key, item in reversed(saved):
            _restore(table, key, item)
        _truncate_streams(streams)
        raise


def _truncate_streams(streams):
    """Drops the stream records a failed transaction added ({table: (shard, length before)})."""
    for shard, length in streams.values():
        if len(shard.items) > length:
            del shard.items[length:]


class _NoTableCopies:
    """The `copy` module as moto's DynamoDB backend module sees it: a table is not copied."""

    def __init__(self, table_type):
        self.table_type = table_type

    def deepcopy(self, value, memo=None):
        if isinstance(value, self.table_type):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name):
        return getattr(copy, name)


def _sqs_now_millis(dt=None):
    """moto's `unix_time_millis`: epoch milliseconds of `dt`, or of now from `time.time()`."""
    import time

    from moto.core.utils import unix_time

    return unix_time(dt) * 1000.0 if dt is not None else time.time() * 1000.0


def _retention_check(self, queue_name, message):
    """moto's check, with the retention period read from the queue instead of its attributes."""
    import time

    retention_period = int(self.get_queue(queue_name).message_retention_period)
    return retention_period + message.sent_timestamp / 1000 > time.time()


def _process_s3_files(self, s3_backend, bucket):
    """moto's `TableImport._process_s3_files` (5.2.5), each line of each file read as one JSON
    object (DynamoDB's DYNAMODB_JSON import format) instead of through `JsonParser`."""
    from moto.core.utils import gzip_decompress
    from moto.dynamodb.models import dynamodb_backends

    dynamo = dynamodb_backends[self.account_id][self.region_name]
    self.table = dynamo.create_table(
        name=self.table_name, billing_mode=self.billing_mode, throughput=self.throughput,
        schema=self.key_schema, global_indexes=self.global_indexes, indexes=None, attr=self.attrs,
        sse_specification=None, streams=None, tags=[], deletion_protection_enabled=False,
        warm_throughput=None,
    )
    keys, _, _, _ = s3_backend.list_objects(
        bucket, prefix=self.s3_source.get("S3KeyPrefix"), delimiter=None, marker=None, max_keys=None,
    )
    for key in keys:
        raw = gzip_decompress(key.value) if self.compression_type == "GZIP" else key.value
        for line in raw.decode("utf-8").splitlines():
            if not line.strip():
                continue
            try:
                self.processed_count += 1
                self.processed_bytes += len(line)
                self.table.put_item(item_attrs=json.loads(line)["Item"])
                self.imported_count += 1
            except Exception as e:  # as moto's: counted, the import then FAILED
                self.failure_message = str(e)
                self.error_count += 1
    self.status = "COMPLETED" if self.error_count == 0 else "FAILED"


def apply():
    """Installs the replacements in this process."""
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules

    import moto.dynamodb.models as dynamodb_models
    from moto.dynamodb.models.table import Table

    dynamodb_models.copy = _NoTableCopies(Table)
    DynamoDBBackend.transact_write_items = transact_write_items

    import moto.cognitoidp.models as cognito_models

    cognito_models.jwk = _JwkImportingOnce(cognito_models.jwk)

    import moto.sqs.models as sqs_models

    sqs_models.unix_time_millis = _sqs_now_millis
    sqs_models.SQSBackend.is_message_valid_based_on_retention_period = _retention_check

    from moto.dynamodb.models.table_import import TableImport

    TableImport._process_s3_files = _process_s3_files


class _JwkImportingOnce:
    """`joserfc.jwk` as moto's Cognito models see it: `RSAKey.import_key` of the same JSON key
    returns the key imported the first time (moto imports its one resource key for every
    user pool; a key object is only read afterwards, to sign)."""

    def __init__(self, jwk):
        self._jwk = jwk
        self.RSAKey = _RSAKeyImportingOnce(jwk.RSAKey)

    def __getattr__(self, name):
        return getattr(self._jwk, name)


class _RSAKeyImportingOnce:
    def __init__(self, rsa_key):
        self._rsa_key = rsa_key
        self._imported = {}

    def __getattr__(self, name):
        return getattr(self._rsa_key, name)

    def import_key(self, value, *args, **kwargs):
        if not isinstance(value, dict) or args or kwargs:
            return self._rsa_key.import_key(value, *args, **kwargs)
        text = json.dumps(value, sort_keys=True)
        if text not in self._imported:
            self._imported[text] = self._rsa_key.import_key(value)
        return self._imported[text]
