//! The sm_90a branch of an emitted source on the simulator: each inline
//! `wgmma.mma_async` statement (`asm volatile("..." : accumulators : A, B, scale-d)`)
//! becomes a call of `sim_wgmma.h`'s `attn_sim_wgmma`, which g++ can compile. The rewrite
//! reads the instruction's shape, types, operand forms and immediates from its PTX text and
//! maps each `%i` to its operand expression, so any form the emitter writes is parsed, not
//! pattern-matched; a statement it cannot read fails the test.

/// One `"constraint"(expression)` operand of an inline-asm statement.
struct Operand {
    constraint: String,
    expr: String,
}

/// `source` with every `wgmma.mma_async` inline-asm statement replaced by a simulator call.
pub fn rewrite(source: &str) -> Result<String, String> {
    const OPEN: &str = "asm volatile(\"";
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let body = &rest[at + OPEN.len()..];
        let close = body
            .find('"')
            .ok_or("an inline asm string without its end")?;
        let template = &body[..close];
        let (operands, used) = operands(&body[close + 1..])?;
        if !template.contains("wgmma.mma_async") {
            return Err(format!(
                "inline asm the simulator does not know: {template}"
            ));
        }
        out.push_str(&call(template, &operands)?);
        rest = &body[close + 1 + used..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The operands after an asm template (` : outs : ins);`), flattened in `%i` order, and the
/// bytes read up to and including the statement's `;`.
fn operands(text: &str) -> Result<(Vec<Operand>, usize), String> {
    let bytes = text.as_bytes();
    let mut ops = Vec::new();
    let mut i = 0;
    loop {
        match bytes.get(i) {
            Some(b' ' | b':' | b',' | b'\n') => i += 1,
            Some(b')') => {
                let semi = text[i..].find(';').ok_or("an asm statement without `;`")?;
                return Ok((ops, i + semi + 1));
            }
            Some(b'"') => {
                let end = i + 1 + text[i + 1..].find('"').ok_or("an unclosed constraint")?;
                let constraint = text[i + 1..end].to_string();
                let (expr, next) = parenthesized(text, end + 1)?;
                ops.push(Operand { constraint, expr });
                i = next;
            }
            _ => return Err(format!("unexpected asm operand text: {}", &text[i..])),
        }
    }
}

/// The balanced `( ... )` starting at `from`: its inside and the index after it.
fn parenthesized(text: &str, from: usize) -> Result<(String, usize), String> {
    if text.as_bytes().get(from) != Some(&b'(') {
        return Err("an asm operand without its expression".into());
    }
    let mut depth = 0usize;
    for (i, c) in text[from..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Ok((text[from + 1..from + i].to_string(), from + i + 1));
                }
            }
            _ => {}
        }
    }
    Err("unbalanced parentheses in an asm operand".into())
}

/// The operand `%i` names (`%12` → its expression).
fn operand<'a>(ops: &'a [Operand], name: &str) -> Result<&'a Operand, String> {
    let i: usize = name
        .trim()
        .strip_prefix('%')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("not an operand reference: {name}"))?;
    ops.get(i)
        .ok_or_else(|| format!("operand {name} out of range"))
}

/// Splits `text` at the commas outside braces.
fn top_level_items(text: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(text[start..].trim());
    items
}

/// The simulator call for one `wgmma.mma_async` template and its operands.
fn call(template: &str, ops: &[Operand]) -> Result<String, String> {
    let instr = template
        .split("\\n")
        .find(|l| l.starts_with("wgmma.mma_async"))
        .ok_or("no wgmma line in the template")?;
    let (opcode, args) = instr
        .trim_end_matches(';')
        .split_once(' ')
        .ok_or("a wgmma without operands")?;
    let n: usize = opcode
        .split('.')
        .find_map(|p| p.strip_prefix("m64n")?.strip_suffix("k16")?.parse().ok())
        .ok_or_else(|| format!("no m64nNk16 shape in {opcode}"))?;
    let bf16 = match opcode.rsplit('.').next() {
        Some("bf16") => true,
        Some("f16") => false,
        other => return Err(format!("unsimulated wgmma input type {other:?}")),
    };
    if !opcode.contains(".f32.") {
        return Err(format!("unsimulated wgmma accumulator in {opcode}"));
    }
    let items = top_level_items(args);
    let [d, a, b, p, imms @ ..] = items.as_slice() else {
        return Err(format!("unreadable wgmma operands: {args}"));
    };
    let accs: Vec<String> = d
        .trim_matches(|c| c == '{' || c == '}')
        .split(',')
        .map(|r| {
            let o = operand(ops, r)?;
            match o.constraint.as_str() {
                "+f" => Ok(format!("&({})", o.expr)),
                c => Err(format!("an accumulator with constraint {c}")),
            }
        })
        .collect::<Result<_, String>>()?;
    if accs.len() != n / 2 {
        return Err(format!("m64n{n}k16 with {} accumulators", accs.len()));
    }
    let scale_d = scale_d_operand(template, p, ops)?;
    let imms: Vec<&str> = imms.to_vec();
    let (a_regs, a_desc, (scale_a, scale_b, trans_a, trans_b)) = if a.starts_with('{') {
        let regs: Vec<String> = a
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .map(|r| operand(ops, r).map(|o| format!("(unsigned)({})", o.expr)))
            .collect::<Result<_, String>>()?;
        let [sa, sb, tb] = imms.as_slice() else {
            return Err(format!("register-A wgmma immediates: {imms:?}"));
        };
        (Some(regs), "0ull".to_string(), (*sa, *sb, "0", *tb))
    } else {
        let [sa, sb, ta, tb] = imms.as_slice() else {
            return Err(format!("descriptor-A wgmma immediates: {imms:?}"));
        };
        (None, operand(ops, a)?.expr.clone(), (*sa, *sb, *ta, *tb))
    };
    let b_desc = &operand(ops, b)?.expr;
    let a_arg = match &a_regs {
        Some(regs) => format!("const unsigned attn_sim_ar[4] = {{{}}}; ", regs.join(", ")),
        None => String::new(),
    };
    Ok(format!(
        "{{ float* const attn_sim_d[] = {{{accs}}}; {a_arg}attn_sim_wgmma<{n}, {bf16}>(attn_sim_d, {ar}, {a_desc}, {b_desc}, {scale_d}, {scale_a}, {scale_b}, {trans_a}, {trans_b}); }}",
        accs = accs.join(", "),
        ar = if a_regs.is_some() { "attn_sim_ar" } else { "nullptr" },
    ))
}

/// Whether the instruction adds to its accumulators: the predicate `p` the template sets
/// from an operand (`setp.ne.b32 p, %i, 0`), or an immediate.
fn scale_d_operand(template: &str, p: &str, ops: &[Operand]) -> Result<String, String> {
    if let Ok(v) = p.parse::<i64>() {
        return Ok(format!("{}", v != 0));
    }
    let setp = template
        .split("\\n")
        .find_map(|l| l.strip_prefix(&format!("setp.ne.b32 {p}, ")))
        .ok_or_else(|| format!("the scale-d predicate {p} is not set in the template"))?;
    let src = setp
        .strip_suffix(", 0;")
        .ok_or_else(|| format!("unreadable scale-d predicate: {setp}"))?;
    Ok(format!("(({}) != 0)", operand(ops, src)?.expr))
}
