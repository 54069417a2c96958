-- Every component upload a seller makes, counted before anything is
-- compiled: refused components and the same bytes sent again count too, so
-- the daily quota bounds the compilations one seller can cause.
create table tsl_tool_upload (
    upload_id integer primary key autoincrement,
    tool_id blob not null references tsl_tool (tool_id),
    seller_agent_id blob not null references agent (agent_id),
    uploaded_at text not null
);
create index tsl_tool_upload_by_tool on tsl_tool_upload (tool_id, uploaded_at);
create index tsl_tool_upload_by_seller on tsl_tool_upload (seller_agent_id, uploaded_at);
