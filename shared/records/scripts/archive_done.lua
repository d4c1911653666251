-- Mark an archive's progress done after its failure decision was recorded (lib.lua prepended).
-- KEYS: 1 archive progress hash
-- ARGV: 1 progress fields (JSON object), 2 retention in milliseconds (section 9.9)
hset_json(KEYS[1], ARGV[1])
retain(tonumber(ARGV[2]), {KEYS[1]})
return 1
