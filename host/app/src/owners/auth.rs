//! Owner sign-up, sign-in, sign-out and password change; agent-type owners.

use uuid::Uuid;

use anchor_domain::owners::{self, AccountStatus, MAX_OWNER_DEPTH, OwnerType, PRIVACY_VERSION, TERMS_VERSION};
use anchor_domain::records::{AgentRecord, OwnerRecord};
use anchor_ports::NewOwner;

use super::sessions::{self, Session};
use super::{account_status, managed, password, password_checked, reserve_password_attempt};
use crate::{AppError, AppResult, Services};

/// What a sign-up form carries.
#[derive(Clone, Debug)]
pub struct SignUp {
    pub email: String,
    pub password: String,
    pub browser_language: Option<String>,
    pub timezone: Option<String>,
    pub terms_agreed: bool,
    pub privacy_agreed: bool,
}

fn short(name: &str, value: Option<String>, max: usize) -> AppResult<Option<String>> {
    match value {
        Some(v) if v.chars().count() > max => Err(AppError::invalid("INVALID_VALUE", format!("{name} is longer than {max} characters"))),
        other => Ok(other),
    }
}

/// Creates a human owner account (signing in is a separate step).
pub async fn sign_up(services: &Services, form: SignUp) -> AppResult<NewOwner> {
    let email = owners::normalize_email(&form.email)?;
    let browser_language = short("browser_language", form.browser_language, 35)?;
    let timezone = short("timezone", form.timezone, 64)?;
    if !form.terms_agreed {
        return Err(AppError::invalid("TERMS_REQUIRED", "terms_agreed must be true: the terms of service must be accepted"));
    }
    if !form.privacy_agreed {
        return Err(AppError::invalid("PRIVACY_REQUIRED", "privacy_agreed must be true: the privacy policy must be accepted"));
    }
    owners::check_password(&form.password, Some(&email))?;
    let hash = password::hash_off_thread(&form.password).await.map_err(AppError::Internal)?;
    let owner = NewOwner {
        owner_id: Uuid::new_v4(),
        email: Some(email),
        password_hash: Some(hash),
        owner_type: OwnerType::Human,
        managing_agent_id: None,
        parent_owner_id: None,
        owner_depth: 0,
        browser_language,
        timezone,
        residence_country: None,
        terms_version: TERMS_VERSION.into(),
        privacy_version: PRIVACY_VERSION.into(),
        created_at: services.clock.now(),
    };
    if !services.store.insert_owner(&owner).await? {
        return Err(AppError::Conflict {
            code: "EMAIL_ALREADY_REGISTERED",
            message: "this email already has an owner account; sign in instead".into(),
        });
    }
    Ok(owner)
}

/// Signs in with email and password, from `client` (an IPv4 address or an
/// IPv6 /64), with the device secret the browser kept from an earlier
/// sign-in of this owner, if any. Five wrong passwords for one email from one
/// client in 15 minutes (or 20 in a day) spend that pair's window: 429 after,
/// even for the right password, from that client only (see
/// [`super::LOGIN_PER_CLIENT`] and the other limits). A sign-in from a device
/// of the owner's is held to that device's own limit alone (decision 0064):
/// guessing from any number of clients elsewhere cannot lock the owner out of
/// its own browser. A sign-in that succeeds from a new device makes it one of
/// the owner's (its secret, once, in the answer).
pub async fn sign_in(
    services: &Services,
    email: &str,
    password: &str,
    client: &str,
    device: Option<&str>,
) -> AppResult<(OwnerRecord, Session, Option<String>)> {
    let email = email.trim().to_lowercase();
    let owner = services.store.owner_by_email(&email).await?;
    let device_hash = device.filter(|d| anchor_domain::agents::has_secret_shape(DEVICE_PREFIX, d)).map(anchor_domain::agents::hash_secret);
    let device_owner = match device_hash {
        Some(hash) => services.store.device_owner(&hash).await?,
        None => None,
    };
    let known = owner.as_ref().zip(device_owner).is_some_and(|(owner, device)| owner.owner_id == device);
    let pair = format!("{email}|{client}");
    let device_key = device_hash.map(hex::encode).unwrap_or_default();
    let limits = if known {
        vec![(super::LOGIN_PER_DEVICE, device_key.as_str())]
    } else {
        vec![
            (super::LOGIN_PER_CLIENT_AND_EMAIL, pair.as_str()),
            (super::LOGIN_PER_CLIENT_AND_EMAIL_DAY, pair.as_str()),
            (super::LOGIN_PER_CLIENT, client),
            (super::LOGIN_PER_EMAIL, email.as_str()),
        ]
    };
    reserve_password_attempt(services, &limits).await?;
    let now = services.clock.now();
    // The hash is checked even for an unknown email, so timing does not tell which emails exist.
    let verified = password::verify_off_thread(owner.as_ref().and_then(|o| o.password_hash.as_deref()), password).await;
    let owner = owner.filter(|owner| verified && account_status(owner, now) != AccountStatus::Deleted);
    password_checked(services, &limits, owner.is_some()).await?;
    let Some(owner) = owner else {
        return Err(AppError::Unauthenticated { message: "email or password is wrong".into() });
    };
    let session = sessions::open(services, &owner).await?;
    let new_device = if known {
        None
    } else {
        let secret = new_device_secret();
        services.store.remember_device(owner.owner_id, &anchor_domain::agents::hash_secret(&secret), now).await?;
        Some(secret)
    };
    Ok((owner, session, new_device))
}

/// The prefix of a device secret (then 64 hex digits: 32 random bytes).
pub const DEVICE_PREFIX: &str = "da_dv_";

fn new_device_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    format!("{DEVICE_PREFIX}{}", hex::encode(bytes))
}

/// Changes a human owner's password; every other session of the owner ends.
pub async fn change_password(services: &Services, owner: &OwnerRecord, session_hash: &[u8; 32], current: &str, new: &str) -> AppResult<()> {
    if owner.password_hash.is_none() {
        return Err(AppError::forbidden("HUMAN_OWNER_REQUIRED", "agent-type owners sign in with their agent's token and have no password"));
    }
    super::confirm_password(services, owner, current).await?;
    owners::check_password(new, owner.email.as_deref())?;
    let hash = password::hash_off_thread(new).await.map_err(AppError::Internal)?;
    services.store.set_owner_password(owner.owner_id, &hash).await?;
    services.store.end_owner_sessions(owner.owner_id, Some(session_hash)).await?;
    Ok(())
}

fn agent_owners_enabled(services: &Services) -> AppResult<()> {
    if services.features().agent_owners {
        Ok(())
    } else {
        Err(AppError::Unavailable { code: "FEATURE_NOT_AVAILABLE", message: "agent-type owners are turned off on this service".into() })
    }
}

/// Opens a session for the agent-type owner the authenticated agent acts for.
pub async fn agent_sign_in(services: &Services, agent: &AgentRecord) -> AppResult<(OwnerRecord, Session)> {
    agent_owners_enabled(services)?;
    let owner = match services.store.owner_by_managing_agent(agent.agent_id).await? {
        Some(owner) if account_status(&owner, services.clock.now()) != AccountStatus::Deleted => owner,
        _ => {
            return Err(AppError::forbidden(
                "NOT_DAP_OWNER",
                "this agent is not an owner; a human owner makes it one with POST /dap/owner/register-agent",
            ));
        }
    };
    let session = sessions::open(services, &owner).await?;
    Ok((owner, session))
}

/// Makes an agent the human owner manages an owner in its own right, one
/// level below (at most [`MAX_OWNER_DEPTH`]).
pub async fn promote_agent(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<OwnerRecord> {
    agent_owners_enabled(services)?;
    if owner.owner_type != OwnerType::Human {
        return Err(AppError::forbidden("HUMAN_OWNER_REQUIRED", "only a human owner registers agent-type owners"));
    }
    if owner.owner_depth + 1 > MAX_OWNER_DEPTH {
        return Err(AppError::forbidden("OWNER_DEPTH_EXCEEDED", format!("owners nest at most {MAX_OWNER_DEPTH} levels deep")));
    }
    managed(services, owner, agent_id).await?;
    let new = NewOwner {
        owner_id: Uuid::new_v4(),
        email: None,
        password_hash: None,
        owner_type: OwnerType::Agent,
        managing_agent_id: Some(agent_id),
        parent_owner_id: Some(owner.owner_id),
        owner_depth: owner.owner_depth + 1,
        browser_language: None,
        timezone: None,
        residence_country: owner.residence_country,
        terms_version: owner.terms_version.clone(),
        privacy_version: owner.privacy_version.clone(),
        created_at: services.clock.now(),
    };
    if !services.store.insert_owner(&new).await? {
        return Err(AppError::Conflict { code: "ALREADY_REGISTERED", message: format!("agent {agent_id} is already an owner") });
    }
    services.store.owner(new.owner_id).await?.ok_or_else(|| AppError::Internal(anyhow::anyhow!("owner {} vanished", new.owner_id)))
}
