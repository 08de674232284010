-- CodeSpace store schema, step 12: the policy set record. Every audit row names the set that
-- decided it (`decisions.policy_set_sha256`); this table says, per set, when the server first put
-- it in force and who signed it (the `allowed_signers` principal and the key, as `ssh-keygen -Y`
-- verified them), NULL for a set loaded unsigned (issue 32).
CREATE TABLE policy_sets (
    sha256           TEXT    PRIMARY KEY NOT NULL,
    first_live_ms    INTEGER NOT NULL,
    signer_principal TEXT,
    signer_key       TEXT
);
