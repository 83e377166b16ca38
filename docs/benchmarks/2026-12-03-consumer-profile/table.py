import re,sys
rows=[("whole process (all threads)","PROGRAM TOTALS"),
("librdkafka broker thread: fetch, decompress, parse records+headers","rdkafka_broker.c:rd_kafka_broker_thread_main ["),
("  of which rd_kafka_msgset_parse","rd_kafka_msgset_parse ["),
("  of which LZ4_decompress_safe","LZ4_decompress_safe ["),
("fetch loop (hookline_consumer::run): poll, detach, decode, admit","lib.rs:hookline_consumer::run::{{closure}} ["),
("  BaseConsumer::poll_queue","BaseConsumer<C>::poll_queue ["),
("  BorrowedMessage::detach (copy to OwnedMessage)","BorrowedMessage::detach ["),
("header lookups: wire::header_str, all callers","wire.rs:hookline_common::wire::header_str ["),
("  of which EventMeta::from_headers","wire.rs:hookline_common::wire::EventMeta::from_headers ["),
("  of which RetryHeaders::read","RetryHeaders::read ["),
("per-event task: Pipeline::handle","pipeline.rs:hookline_consumer::pipeline::Pipeline::handle::{{closure}} ["),
("  log handler (one tracing INFO line)","LogHandler as hookline_consumer::handler::Handler>::handle::{{closure}} ["),
("Redis: dedupe::batch_calls (claim+done batches)","dedupe::batch_calls::{{closure}}::{{closure}} ["),
("  Redis reply decode (PipelineSink::poll_read)","PipelineSink<T>::poll_read ["),
("  Redis send_packed_commands","send_packed_commands::{{closure}} ["),
("tokio::task::spawn","tokio::task::spawn::spawn ["),
("scheduler: complete+admit+next_job+pause_changes","SCHED"),
("/metrics scrapes by the bench (artefact)","text.rs:hookline_common::http::admin_response"),
]
def load(f):
    d={}
    for l in open(f):
        m=re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)$",l)
        if m: d.setdefault(m.group(2),int(m.group(1).replace(',','')))
    return d
files=[(load(a),float(n)) for a,n in zip(sys.argv[1::2],sys.argv[2::2])]
def get(d,key):
    if key=="SCHED": return sum(get(d,f"Scheduler::{k} [") for k in ["complete","admit","next_job","pause_changes"])
    for k,v in d.items():
        if key in k: return v
    return 0
for label,key in rows:
    print("| "+label+" | "+" | ".join(f"{get(d,key)/n:,.0f} ({100*get(d,key)/get(d,'PROGRAM TOTALS'):.1f} %)" for d,n in files)+" |")
